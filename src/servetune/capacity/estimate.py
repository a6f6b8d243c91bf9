"""The capacity and its interval from the levels a search measured.

Assuming latency does not fall as load rises, the capacity lies between the highest level whose
SLOs are all met with confidence and the lowest level that violates one with confidence (the
verdict bracket); each end is wrong only when that level's own interval misses (alpha / 2 a
side). For a percentile SLO the curve fitted to the share of values over the limit at the levels
near the crossing (pooled.py) gives a second (1 - alpha) interval, Fieller's; the capacity's
interval is the intersection of the two, so it misses at most as often as the two together
(2 alpha; the coverage target is 90 %). The fit can bound the low end with no level met with
confidence: a p99 of one run is shown under its limit only far under the capacity, where the
share over the limit fitted across several levels near it already says where it crosses. Each
end records what set it (`low_by`, `high_by`).

The point estimate is where the binding SLO crosses its limit: for a percentile, that fitted
crossing; else (a mean, or levels that do not straddle 1 - XX/100) where the SLO's point
estimates cross the limit, linearly interpolated between the adjacent levels on either side. For
a concurrency it is the highest whole level on the meeting side (no fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .levels import LevelResult, pooled_values
from .pooled import Crossing, LevelValues, fitted_crossing
from .slo import Slo, Verdict

# What set an end of the interval
MET, VIOLATED, FIT, NONE = "met level", "violated level", "fit", "none"


@dataclass(frozen=True)
class CapacityEstimate:
    capacity: float   # 0: the SLOs fail already at the lowest level measured
    low: float        # 0 when no level met every SLO with confidence
    high: float       # inf when no level violated one with confidence
    binding: str | None   # the SLO that sets the capacity (the first to cross its limit)
    low_by: str = NONE    # what set each end: a level's verdict (MET, VIOLATED), the FIT, or NONE
    high_by: str = NONE

    @property
    def bounded(self) -> bool:
        return self.low > 0 and math.isfinite(self.high)


def estimate(levels: list[LevelResult], integer: bool = False, alpha: float = 0.05) -> CapacityEstimate:
    """`alpha`: the fit's interval is at 1 - alpha, as each level's verdicts are."""
    by_level = sorted(levels, key=lambda r: r.level)
    violating = [r.level for r in by_level if r.verdict is Verdict.violates]
    high = min(violating, default=math.inf)
    low = max((r.level for r in by_level if r.verdict is Verdict.meets and r.level < high), default=0.0)
    bracket = _Bracket.of_verdicts(low, high)
    under = [r for r in by_level if not r.over_limit]
    over = [r for r in by_level if r.over_limit]
    left = max(under, key=lambda r: r.level, default=None)
    right = min((r for r in over if left is None or r.level > left.level), key=lambda r: r.level, default=None)
    if left is None:
        return bracket.estimate(0.0, _binding(right))
    if right is None or integer:
        return bracket.estimate(left.level, _binding(right))
    crossings: list[tuple[float, str]] = []
    fits: dict[str, Crossing | None] = {}
    binding: str | None
    for jl, jr in zip(left.judgements, right.judgements):
        limit = jl.slo.limit_ms
        pair = None
        if jr.estimate > limit and jr.estimate > jl.estimate:
            share = (limit - jl.estimate) / (jr.estimate - jl.estimate)
            pair = left.level + max(share, 0.0) * (right.level - left.level)
        center = pair if pair is not None else math.sqrt(left.level * right.level)
        fits[str(jl.slo)] = fitted = fitted_crossing(jl.slo, [_values(r, jl.slo) for r in by_level], center, alpha)
        point = fitted.point if fitted is not None else pair
        if point is not None:
            crossings.append((point, str(jl.slo)))
    if crossings:
        point, binding = min(crossings)
    else:  # the right level was ended early on a sure loss, its truncated estimates under the limit
        point, binding = math.sqrt(left.level * right.level), _binding(right)
    if any(f is not None for f in fits.values()):
        bracket = bracket.narrowed(by_level, fits)
    return bracket.estimate(point, binding)


@dataclass(frozen=True)
class _Bracket:
    """The capacity's interval and what set each end."""
    low: float
    high: float
    low_by: str
    high_by: str

    @classmethod
    def of_verdicts(cls, low: float, high: float) -> _Bracket:
        return cls(low, high, MET if low > 0 else NONE, VIOLATED if math.isfinite(high) else NONE)

    def estimate(self, point: float, binding: str | None) -> CapacityEstimate:
        return CapacityEstimate(min(max(point, self.low), self.high), self.low, self.high, binding,
                                self.low_by, self.high_by)

    def narrowed(self, by_level: list[LevelResult], fits: dict[str, Crossing | None]) -> _Bracket:
        """The intersection with the fits' intervals. The capacity is the lowest SLO's crossing,
        so its interval is [the lowest of the SLOs' low ends, the lowest of their high ends];
        an SLO without a fit (a mean) is bounded below by the highest level under `high` at which
        its own statistic met its limit. Where the two intervals do not meet, the verdicts'
        (distribution-free) is kept."""
        lows: list[tuple[float, str]] = []
        highs: list[tuple[float, str]] = [(self.high, self.high_by)]
        for name, fit in fits.items():
            met = max((r.level for r in by_level if r.level < self.high and any(
                str(j.slo) == name and j.verdict is Verdict.meets for j in r.judgements)), default=0.0)
            lows.append(max((met, MET if met > 0 else NONE), (fit.low, FIT) if fit else (0.0, NONE)))
            if fit is not None:
                highs.append((fit.high, FIT))
        low, low_by = min(lows)
        high, high_by = min(highs)
        if low <= self.low:
            low, low_by = self.low, self.low_by
        if high == self.high:
            high_by = self.high_by
        if low > high:
            return self
        return _Bracket(low, high, low_by, high_by)


def _values(r: LevelResult, slo: Slo) -> LevelValues:
    """A level's values of the SLO's metric (a failed request's is infinite), with the requests in
    flight when a run was ended as lost (one value each; ITL's values are gaps, so none are added there)."""
    cut = sum(s.sent - s.completed - s.failed for s in r.samples if s.early_verdict is Verdict.violates)
    return LevelValues(r.level, pooled_values(r.samples, slo.metric),
                       0 if slo.metric == "itl" else cut)


def _binding(r: LevelResult | None) -> str | None:
    if r is None:
        return None
    worst = max(r.judgements, key=lambda j: j.estimate / j.slo.limit_ms if j.n else -math.inf)
    return str(worst.slo)
