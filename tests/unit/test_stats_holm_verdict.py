"""Holm-Bonferroni against hand-computed values; verdicts for single and many comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune.stats import Comparison, Verdict, compare_many, holm, verdict, winners


def test_holm_hand_computed() -> None:
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_is_monotone_and_capped() -> None:
    # 0.01*3 = 0.03, 0.012*2 = 0.024 -> raised to 0.03 (step-down monotonicity), 0.5*1 = 0.5
    assert holm([0.5, 0.012, 0.01]) == pytest.approx([0.5, 0.03, 0.03])
    assert holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 20)
    adj = holm(p)
    order = np.argsort(p)
    assert np.all(np.diff(adj[order]) >= 0) and np.all(adj >= p) and np.all(adj <= 1)


def test_holm_edge_cases() -> None:
    assert holm([]).size == 0
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([float("nan"), 0.01]) == pytest.approx([1.0, 0.02])  # NaN counts, as p = 1
    with pytest.raises(ValueError):
        holm([0.5, 1.5])


def _cmp(base: float, cand: float, p: float, higher: bool = True) -> Comparison:
    return Comparison(effect_pct=100 * (cand / base - 1), ci_low_pct=0, ci_high_pct=0, p_value=p,
                      baseline_mean=base, candidate_mean=cand, n_baseline=3, n_candidate=3,
                      test="welch", higher_is_better=higher)


def test_verdict_rules() -> None:
    assert verdict(_cmp(100, 110, 0.01)) is Verdict.better
    assert verdict(_cmp(100, 90, 0.01)) is Verdict.worse
    assert verdict(_cmp(100, 90, 0.01, higher=False)) is Verdict.better
    assert verdict(_cmp(100, 110, 0.2)) is Verdict.no_difference
    assert verdict(_cmp(100, 110, 0.01), adjusted_p=0.06) is Verdict.no_difference
    assert verdict(_cmp(100, 110, 0.03), alpha=0.01) is Verdict.no_difference
    assert verdict(_cmp(100, 110, math.nan)) is Verdict.no_difference
    with pytest.raises(ValueError):
        verdict(_cmp(100, 110, 0.01), alpha=5)


def test_compare_many_applies_holm_across_candidates() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    cands = {
        "big": [110.0, 111.0, 109.0, 110.5, 109.5],
        "slower": [95.0, 96.0, 94.0, 95.5, 94.5],
        "same": [100.2, 100.8, 99.1, 100.0, 99.9],
    }
    res = compare_many(base, cands, higher_is_better=True)
    assert res["big"].verdict is Verdict.better
    assert res["slower"].verdict is Verdict.worse
    assert res["same"].verdict is Verdict.no_difference
    raw = [res[n].comparison.p_value for n in cands]
    assert [res[n].adjusted_p for n in cands] == pytest.approx(list(holm(raw)))
    assert winners(res) == ["big"]


def test_holm_can_turn_a_marginal_win_into_no_difference() -> None:
    base = [100.0, 102.0, 98.0, 101.0, 99.0]
    marginal = [102.5, 104.0, 100.5, 103.0, 101.5]  # raw p ~ 0.04
    family = {"m": marginal, **{f"n{i}": base for i in range(4)}}
    alone = compare_many(base, {"m": marginal}, higher_is_better=True)["m"]
    assert alone.comparison.p_value < 0.05 and alone.verdict is Verdict.better
    together = compare_many(base, family, higher_is_better=True)["m"]
    assert together.adjusted_p >= 0.05 and together.verdict is Verdict.no_difference


def test_a_significant_but_tiny_gain_is_no_difference_below_the_minimum_effect() -> None:
    from servetune.stats import compare, verdict

    base = [100.0, 100.01, 99.99, 100.0, 100.005]
    cand = [100.1, 100.11, 100.09, 100.1, 100.105]  # +0.1 %, p << 0.05
    cmp = compare(base, cand, higher_is_better=True)
    assert cmp.p_value < 1e-6
    assert verdict(cmp, alpha=0.05) == "better"
    assert verdict(cmp, alpha=0.05, min_effect_pct=1.0) == "no_difference"
