"""The capacity and its interval from the levels a search measured.

Assuming latency does not fall as load rises, the capacity lies between the highest level whose
SLOs are all met with confidence and the lowest level that violates one with confidence; each
end is wrong only when that level's own interval misses (alpha / 2 a side). The point estimate is
where the binding SLO crosses its limit: for a percentile, where a curve fitted to the share of
values over the limit at the levels near it crosses 1 - XX/100 (pooled.py); else (a mean, or
levels that do not straddle that share) where the SLO's point estimates cross the limit, linearly
interpolated between the adjacent levels on either side. For a concurrency it is the highest
whole level on the meeting side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .levels import LevelResult, pooled_values
from .pooled import LevelValues, crossing
from .slo import Slo, Verdict


@dataclass(frozen=True)
class CapacityEstimate:
    capacity: float   # 0: the SLOs fail already at the lowest level measured
    low: float        # 0 when no level met every SLO with confidence
    high: float       # inf when no level violated one with confidence
    binding: str | None   # the SLO that sets the capacity (the first to cross its limit)

    @property
    def bounded(self) -> bool:
        return self.low > 0 and math.isfinite(self.high)


def estimate(levels: list[LevelResult], integer: bool = False) -> CapacityEstimate:
    by_level = sorted(levels, key=lambda r: r.level)
    violating = [r.level for r in by_level if r.verdict is Verdict.violates]
    high = min(violating, default=math.inf)
    low = max((r.level for r in by_level if r.verdict is Verdict.meets and r.level < high), default=0.0)
    under = [r for r in by_level if not r.over_limit]
    over = [r for r in by_level if r.over_limit]
    left = max(under, key=lambda r: r.level, default=None)
    right = min((r for r in over if left is None or r.level > left.level), key=lambda r: r.level, default=None)
    if left is None:
        return CapacityEstimate(0.0, low, high, _binding(right))
    if right is None or integer:
        return CapacityEstimate(_clip(left.level, low, high), low, high, _binding(right))
    crossings: list[tuple[float, str]] = []
    binding: str | None
    for jl, jr in zip(left.judgements, right.judgements):
        limit = jl.slo.limit_ms
        pair = None
        if jr.estimate > limit and jr.estimate > jl.estimate:
            share = (limit - jl.estimate) / (jr.estimate - jl.estimate)
            pair = left.level + max(share, 0.0) * (right.level - left.level)
        center = pair if pair is not None else math.sqrt(left.level * right.level)
        pooled = crossing(jl.slo, [_values(r, jl.slo) for r in by_level], center)
        point = pooled if pooled is not None else pair
        if point is not None:
            crossings.append((point, str(jl.slo)))
    if crossings:
        point, binding = min(crossings)
    else:  # the right level was ended early on a sure loss, its truncated estimates under the limit
        point, binding = math.sqrt(left.level * right.level), _binding(right)
    return CapacityEstimate(_clip(point, low, high), low, high, binding)


def _values(r: LevelResult, slo: Slo) -> LevelValues:
    """A level's values of the SLO's metric, with the requests in flight when a run was ended as
    lost (one value each; ITL's values are gaps, so none are added there)."""
    cut = sum(s.sent - s.completed for s in r.samples if s.early_verdict is Verdict.violates)
    return LevelValues(r.level, pooled_values(r.samples, slo.metric),
                       0 if slo.metric == "itl" else cut)


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def _binding(r: LevelResult | None) -> str | None:
    if r is None:
        return None
    worst = max(r.judgements, key=lambda j: j.estimate / j.slo.limit_ms if j.n else -math.inf)
    return str(worst.slo)
