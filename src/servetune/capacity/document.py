"""A capacity search as JSON: the settings, the capacity with its interval, every level."""

from __future__ import annotations

import math
from typing import Any

from .estimate import CapacityEstimate
from .search import SearchResult, SearchSettings
from .slo import Slo


def _num(x: float) -> float | None:
    """JSON has no infinity or NaN: an open end of an interval (or no value) is null."""
    return x if math.isfinite(x) else None


def capacity_document(result: SearchResult, est: CapacityEstimate, slos: list[Slo], settings: SearchSettings,
                      load: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        **extra,
        "load": load,
        "slos": [str(s) for s in slos],
        "alpha": settings.alpha,
        "capacity": {"value": est.capacity, "low": est.low, "high": _num(est.high), "binding": est.binding},
        "levels_measured": len(result.levels),
        "requests": result.requests,
        "error": result.error,
        "levels": [
            {"level": r.level, "runs": len(r.samples), "requests": r.requests, "completed": r.completed,
             "verdict": r.verdict.value, "stopped_early": r.stopped,
             "slos": [{"slo": str(j.slo), "key": j.slo.key, "values": j.n, "estimate_ms": _num(j.estimate),
                       "low_ms": _num(j.low), "high_ms": _num(j.high), "verdict": j.verdict.value}
                      for j in r.judgements]}
            for r in result.levels
        ],
    }
