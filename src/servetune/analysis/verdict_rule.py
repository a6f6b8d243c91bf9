"""The study's verdict rule: comparisons judged boot against boot get the selection-calibrated
test of the design the study ran (stats/pipeline.py); single-boot ones stay screening results.

A candidate measured on one boot is only promising or not (its plain p-value ranks it for
re-validation, no correction: it cannot be named winner). A config with boots on both sides —
a finalist — is tested at the critical value of the whole screen -> finalist -> re-validation
pipeline, its p-value the null chance of any finalist reaching its T at any look, and its
interval ``exp(d ± c * se) - 1`` at that critical value, so the interval excludes 0 exactly when
the verdict is better or worse. The headline and every per-scenario metric follow this one rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import stats
from ..stats.pipeline import Design, calibrated_p, critical_level, critical_t
from ..store import StudyStore
from ..study.spec import StudySpec

LEGACY_MAX_BOOTS = 2   # a study started before re-validation until decided: screening boot + one fresh


@dataclass(frozen=True)
class StudyDesign:
    """The pipeline a study runs, before the variance ratio of a metric is known."""

    screened: int                # candidates measured during the search
    finalists: int               # the study's `finalists`
    baseline_screen_boots: int   # the baseline's boots before the finalists were picked
    max_boots: int               # the leading finalist's cap (re-validation until decided)

    def calibrated(self) -> Design:
        """The design the critical value is simulated for. With replicates the null of T depends on
        the replicate/boot variance ratio, and the critical value falls as the ratio grows
        (benchmarks/verdict_calibration.py prints it on a grid): plugging in the ratio a study
        estimates from 2-3 boot-level df named false winners in 10 % of studies, so the least
        favourable ratio, 0 (all noise boot to boot, as with one value a boot), is used for every study."""
        return Design(screened=self.screened, finalists=max(self.finalists, 1),
                      baseline_screen_boots=self.baseline_screen_boots, fresh_boots=1,
                      extra_looks=max(self.max_boots - 2, 0))


def revalidation_cap(store: StudyStore) -> int:
    """The cap the study started with (written before its first boot), or the fixed design of a
    study that began before re-validation until decided existed."""
    cap = store.revalidation_cap()
    return LEGACY_MAX_BOOTS if cap is None else cap


def record_cap(store: StudyStore, spec: StudySpec) -> None:
    """Fix the cap at the study's start; a study already in its final phase keeps its old design."""
    if store.revalidation_cap() is None and store.final_plan() is None:
        store.set_revalidation_cap(spec.revalidation.max_boots)


@dataclass(frozen=True)
class Judged:
    """A comparison under the verdict rule, with what re-validation needs to decide."""

    comparison: stats.Comparison
    p_adjusted: float | None    # selection-calibrated; None for a screening (single-boot) comparison
    t: float                    # improvement / se on the log scale (positive: better)
    se: float
    critical: float = math.nan  # the t a winner needs at these df (NaN for a screening comparison)
    level: float = math.nan     # the nominal one-sided p a winner needs in this design, at any df
    df: int = 0                 # boot-level df of the variance behind se


def judge(baseline: stats.hierarchy.Boots, candidate: stats.hierarchy.Boots, components: stats.VarianceComponents,
          design: Design | None, *, higher_is_better: bool, alpha: float) -> Judged:
    cmp = stats.compare_boots(baseline, candidate, components, higher_is_better=higher_is_better,
                              confidence=1.0 - alpha)
    d, se = stats.log_difference(baseline, candidate, components)
    sign = 1.0 if higher_is_better else -1.0
    t = sign * d / se if se > 0 else (math.copysign(math.inf, sign * d) if d else 0.0)
    if design is None or min(len(baseline), len(candidate)) < 2 or not components.known:
        return Judged(cmp, None, t, se)
    level, df = critical_level(design, alpha), components.boot_df
    c = critical_t(level, df)
    calibrated = cmp.model_copy(update={
        "ci_low_pct": 100.0 * math.expm1(d - c * se), "ci_high_pct": 100.0 * math.expm1(d + c * se),
        "test": "selection-calibrated"})
    return Judged(calibrated, calibrated_p(t, df, design), t, se, c, level, df)
