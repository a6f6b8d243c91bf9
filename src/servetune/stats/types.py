"""Result types of servetune.stats: plain, frozen, JSON-serialisable."""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="strings")  # NaN/inf survive strict JSON


class Interval(_Frozen):
    """A point estimate with a two-sided confidence interval.

    ``low``/``high`` are ``-inf``/``+inf`` when the data cannot bound the estimate (one replicate).
    """

    estimate: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0

    @property
    def rel_half_width(self) -> float:
        """Half width as a fraction of ``|estimate|`` (``inf`` for a zero estimate or an unbounded interval)."""
        if self.estimate == 0 or not math.isfinite(self.half_width):
            return math.inf
        return self.half_width / abs(self.estimate)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


class Comparison(_Frozen):
    """A candidate against the baseline on one metric.

    ``effect_pct`` is the plain relative change of the metric, ``100 * (candidate / baseline - 1)``:
    -10 means the candidate's value is 10 % lower, whatever the metric's direction; ``higher_is_better``
    says which sign is an improvement. ``baseline_mean``/``candidate_mean`` hold the compared
    statistic (the mean of replicate values for ``compare``; the pooled percentile for
    ``compare_percentile``, named by ``statistic``). ``n_*`` count replicates (runs).
    """

    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    baseline_mean: float
    candidate_mean: float
    n_baseline: int
    n_candidate: int
    test: str
    higher_is_better: bool
    confidence: float = 0.95
    statistic: str = "mean"

    @property
    def improvement_pct(self) -> float:
        """``effect_pct`` signed so that positive is always better."""
        return self.effect_pct if self.higher_is_better else -self.effect_pct


class Verdict(StrEnum):
    better = "better"
    worse = "worse"
    no_difference = "no_difference"


class Assessment(_Frozen):
    """One candidate's comparison, its multiplicity-adjusted p-value and the verdict drawn from it."""

    name: str
    comparison: Comparison
    adjusted_p: float
    verdict: Verdict


class Decision(_Frozen):
    """Whether to stop adding replicates to a config, and why.

    ``rule`` is one of ``min_reps`` (keep going), ``precise``, ``worse``, ``max_reps`` or ``continue``.
    """

    stop: bool
    reason: str
    rule: str
    n: int
    rel_half_width: float
