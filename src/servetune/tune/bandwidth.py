"""The study's memory bandwidth, measured once at its start and kept in the store's meta.

A resumed study keeps the number it has (the report's roofline of every boot then uses one
measurement). Off with `SERVETUNE_NO_BANDWIDTH=1` or the study's `measure_bandwidth: false`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..engine.bandwidth import measure_with
from ..engine.defaults import engine_interpreter
from ..store import StudyStore, meta

OFF_VARIABLE = "SERVETUNE_NO_BANDWIDTH"


def ensure_measured(store: StudyStore, command: list[str], env: dict[str, str], *, enabled: bool,
                    note: Callable[[str], None],
                    measure: Callable[[str, dict[str, str]], dict[str, Any] | str] | None = None) -> None:
    """Measure with the engine command's interpreter (servetune's own where that is a container)
    and the first slot's environment, unless it is off or the store already holds an answer."""
    if not enabled or os.environ.get(OFF_VARIABLE) == "1" or store.get_meta_json(meta.BANDWIDTH) is not None:
        return
    python = engine_interpreter(command) or sys.executable
    result = (measure or measure_with)(python, {**os.environ, **env})
    if isinstance(result, str):  # kept too, so a resumed study does not try again; the report says why
        store.set_meta_json(meta.BANDWIDTH, {"unavailable": result})
        note(f"memory bandwidth not measured: {result}")
        return
    store.set_meta_json(meta.BANDWIDTH, result)
    note(f"memory bandwidth {result['read_gbps']:.0f} GB/s read ({result.get('device', '?')})")


def stored(store: StudyStore) -> dict[str, Any] | None:
    """The measurement the study holds, None when it has none (or only the reason why)."""
    value = store.get_meta_json(meta.BANDWIDTH)
    return value if isinstance(value, dict) and "read_gbps" in value else None
