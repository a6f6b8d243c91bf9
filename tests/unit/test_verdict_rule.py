"""The study's verdict rule around the calibrated test: censored capacities are bounds (shown as
such, kept out of the variance, labelled only where the bound errs against the label), what
re-validation does next, and intervals that can be true."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune import stats
from servetune.analysis import analysis
from servetune.analysis.capacity_runs import censored_value, censoring, interval_text
from servetune.analysis.revalidation import next_look
from servetune.analysis.types import ConfigResult, Effect, StudyAnalysis
from servetune.analysis.verdict_rule import judge
from servetune.capacity.slo import quantile_ci
from servetune.engine.config import Config
from servetune.stats.pipeline import Design, critical_level, critical_t
from servetune.study.spec import StudySpec

TOP = {"capacity": 64.0, "capacity_low": 64.0, "capacity_high": None, "capacity_binding": None}
FIRST = {"capacity": 0.0, "capacity_low": 0.0, "capacity_high": 1.0, "capacity_binding": "ttft:p95<=1000ms"}
BRACKETED = {"capacity": 12.9, "capacity_low": 11.3, "capacity_high": 13.5, "capacity_binding": "ttft:p95<=1000ms"}
UNDECIDED_TOP = {"capacity": 12.0, "capacity_low": 8.0, "capacity_high": None, "capacity_binding": "itl:p99<=100ms"}


def test_a_capacity_met_at_the_top_level_or_failed_at_the_first_is_a_bound() -> None:
    assert [censoring(s) for s in (TOP, FIRST, BRACKETED, UNDECIDED_TOP)] == ["right", "left", "", ""]
    assert interval_text(TOP) == "≥ 64"
    assert interval_text(FIRST) == "≤ 1"
    assert interval_text(BRACKETED) == "12.9 [11.3, 13.5]"
    assert interval_text(UNDECIDED_TOP) == "12 [8, ∞]"   # crossed its limit: an estimate, unbounded above
    assert censored_value(FIRST) == 1.0 and censored_value(TOP) == 64.0


def test_a_bound_keeps_a_label_only_where_it_errs_against_it() -> None:
    spec = StudySpec.model_validate({"name": "s", "engine": {"command": ["x"], "model": "m"},
                                     "scenarios": [{"name": "a", "input_len": 8, "output_len": 4}]})
    base = [[10.0], [10.4]]
    bigger = [[20.0], [20.8]]
    c = stats.variance_components([base, bigger])
    judged = judge(base, bigger, c, Design(1, 1), higher_is_better=True, alpha=0.05)
    assert analysis._to_effect("capacity", judged, spec, boots=2).verdict == "better"
    # The candidate at least its value (right), or the baseline at most its own: still better.
    assert analysis._effect_censoring([], ["right", ""]) == "right"
    assert analysis._effect_censoring(["left"], [""]) == "right"
    assert analysis._to_effect("capacity", judged, spec, "right", boots=2).verdict == "better"
    # The baseline at least its value: the true gain may be smaller, so no label.
    assert analysis._effect_censoring(["right"], [""]) == "left"
    assert analysis._to_effect("capacity", judged, spec, "left", boots=2).verdict == "no_difference"
    assert analysis._effect_censoring(["right"], ["right"]) == "both"


def test_censored_boots_do_not_enter_the_boot_variance() -> None:
    exact = [[9.9], [10.1]]
    config = ConfigResult(key="k", config=Config.of({}), params={}, label="k", trial_ids=[1, 2], outcome="ok",
                          objective_boots=[[64.0], [128.0]], objective_censored=["right", ""])
    baseline = ConfigResult(key="b", config=Config.of({}), params={}, label="b", trial_ids=[3, 4], outcome="ok",
                            objective_boots=exact, objective_censored=["", ""])
    pooled = analysis.objective_components([config, baseline])
    assert pooled.boot_df == 1
    assert pooled.boot_var == pytest.approx(stats.variance_components([exact]).boot_var)


def test_a_lower_bound_stretched_for_dependence_stays_positive() -> None:
    values = np.random.default_rng(1).lognormal(0.0, 1.5, 400)
    low, high = quantile_ci(values, 0.95, 0.05, n_eff=8)
    estimate = float(np.percentile(values, 95))
    assert 0 < low < estimate < high


def _analysis(effect_pct: float, t: float, boots: int, base_boots: int, *, winner: bool = False) -> StudyAnalysis:
    level = critical_level(Design(5, 2, extra_looks=3), 0.05)
    df = boots + base_boots - 2
    crit = critical_t(level, df)
    d = math.log1p(effect_pct / 100)
    se = d / t
    effect = Effect("objective", effect_pct, 100 * math.expm1(d - crit * se), 100 * math.expm1(d + crit * se),
                    0.01, 0.2, "no_difference", unit="boot", t=t, critical=crit, level=level, df=df)
    finalist = ConfigResult(key="f", config=Config.of({"x": 1}), params={}, label="x=1", trial_ids=[2],
                            outcome="ok", objective_boots=[[1.0]] * boots, objective_effect=effect, is_finalist=True)
    baseline = ConfigResult(key="b", config=Config.of({}), params={}, label="baseline", trial_ids=[1],
                            outcome="ok", objective_boots=[[1.0]] * base_boots, is_baseline=True)
    return StudyAnalysis("s", "output_throughput", "maximize", baseline, [baseline, finalist],
                         finalist if winner else None, "")


SPEC = StudySpec.model_validate({"name": "s", "engine": {"command": ["x"], "model": "m"}, "finalists": 2,
                                 "scenarios": [{"name": "a", "input_len": 8, "output_len": 4}]})


def test_an_undecided_leader_is_booted_again_until_the_cap() -> None:
    look = next_look(_analysis(20.0, 3.0, boots=2, base_boots=3), SPEC, cap=5)
    assert look.key == "f" and 0 < look.power_next < look.power_cap < 1
    assert "leader x=1 at 2 of 5 boot(s)" in look.line() and "boots it and the baseline again" in look.line()
    at_cap = next_look(_analysis(20.0, 3.0, boots=5, base_boots=6), SPEC, cap=5)
    assert at_cap.key is None and "undecided at the cap" in at_cap.why


def test_a_decided_or_hopeless_leader_is_not_booted_again() -> None:
    assert next_look(_analysis(20.0, 9.0, boots=2, base_boots=3, winner=True), SPEC, cap=5).key is None
    hopeless = next_look(_analysis(0.5, 0.2, boots=2, base_boots=3), SPEC, cap=5)
    assert hopeless.key is None and hopeless.why.startswith("ruled out")
    no_revalidation = SPEC.model_copy(update={"finalists": 0})
    assert next_look(_analysis(20.0, 3.0, boots=2, base_boots=3), no_revalidation, cap=5).leader is None
