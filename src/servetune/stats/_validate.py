"""Input checks shared by the stats functions (programming errors -> ValueError)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray


def clean(values: ArrayLike, name: str, *, min_n: int = 1) -> NDArray[np.float64]:
    """A 1-D float array of finite values; NaN/inf is an error, not something to drop silently."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of numbers, got shape {arr.shape}")
    if arr.size < min_n:
        raise ValueError(f"{name}: need at least {min_n} value(s), got {arr.size}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}: non-finite value {arr[bad[0]]!r} at index {bad[0]}")
    return arr


def clean_runs(runs: Sequence[ArrayLike], name: str) -> list[NDArray[np.float64]]:
    if len(runs) == 0:
        raise ValueError(f"{name}: need at least one run")
    return [clean(r, f"{name}[{i}]") for i, r in enumerate(runs)]


def check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)
