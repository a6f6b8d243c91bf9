"""Verdicts: better / worse / no difference, for one comparison or a family of candidates."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from numpy.typing import ArrayLike

from servetune.stats.compare import MeanTest, compare
from servetune.stats.multiple import holm
from servetune.stats.types import Assessment, Comparison, Verdict


def verdict(comparison: Comparison, alpha: float = 0.05, adjusted_p: float | None = None,
            min_effect_pct: float = 0.0) -> Verdict:
    """``better``/``worse`` when the (adjusted, if given) p-value is below ``alpha``, by the sign of
    the difference and the metric's direction; otherwise ``no_difference`` (also for a NaN p).

    ``min_effect_pct``: a significant change smaller than this (in % of the baseline) is still
    ``no_difference``: with tight replicates, +0.1 % can be significant and worth nothing."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    p = comparison.p_value if adjusted_p is None else adjusted_p
    diff = comparison.candidate_mean - comparison.baseline_mean
    if math.isnan(p) or p >= alpha or diff == 0:
        return Verdict.no_difference
    if min_effect_pct > 0 and not abs(comparison.effect_pct) >= min_effect_pct:
        return Verdict.no_difference
    return Verdict.better if (diff > 0) == comparison.higher_is_better else Verdict.worse


SCREENING_LABELS = {Verdict.better: "promising", Verdict.worse: "not_promising",
                    Verdict.no_difference: "no_difference"}


def label(v: Verdict, boots: int) -> str:
    """What the evidence supports: ``better``/``worse`` need the candidate measured on >= 2 boots
    (boot against boot); a config measured on one boot can only be ``promising`` or
    ``not_promising`` — worth re-validating or not — however strong its replicates look, because
    one boot's luck is shared by all its replicates."""
    return str(v) if boots >= 2 else SCREENING_LABELS[v]


def assess(comparisons: Mapping[str, Comparison], alpha: float = 0.05,
           min_effect_pct: float = 0.0) -> dict[str, Assessment]:
    """Holm-adjust the p-values of a family of comparisons against one baseline, then give verdicts."""
    names = list(comparisons)
    adjusted: list[float] = holm([comparisons[n].p_value for n in names]).tolist() if names else []
    return {
        n: Assessment(name=n, comparison=comparisons[n], adjusted_p=float(adj),
                      verdict=verdict(comparisons[n], alpha, float(adj), min_effect_pct))
        for n, adj in zip(names, adjusted)
    }


def compare_many(
    baseline: Sequence[float] | ArrayLike,
    candidates: Mapping[str, Sequence[float] | ArrayLike],
    *,
    higher_is_better: bool,
    alpha: float = 0.05,
    test: MeanTest = "welch",
    min_effect_pct: float = 0.0,
) -> dict[str, Assessment]:
    """Compare every candidate's replicate values with the baseline's, Holm-corrected across candidates."""
    comps = {
        name: compare(baseline, values, higher_is_better=higher_is_better, confidence=1.0 - alpha, test=test)
        for name, values in candidates.items()
    }
    return assess(comps, alpha, min_effect_pct)


def winners(assessments: Mapping[str, Assessment]) -> list[str]:
    """Candidates judged ``better``, best improvement first."""
    better = [a for a in assessments.values() if a.verdict is Verdict.better]
    return [a.name for a in sorted(better, key=lambda a: a.comparison.improvement_pct, reverse=True)]
