"""Multiple-comparison correction across all configs compared with the baseline."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def holm(p_values: ArrayLike) -> NDArray[np.float64]:
    """Holm-Bonferroni step-down adjusted p-values, in the input order.

    The i-th smallest p (0-based) is multiplied by (m - i), then made monotone by a running
    maximum and capped at 1; reject H_i at level alpha iff adjusted_i < alpha. A NaN p-value
    (a comparison that could not be tested) counts as a comparison made with no evidence: p = 1.
    (scipy offers only FDR control — ``false_discovery_control`` — not Holm's FWER procedure.)
    """
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"p_values: expected a 1-D sequence, got shape {p.shape}")
    p = np.where(np.isnan(p), 1.0, p)
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p_values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted
