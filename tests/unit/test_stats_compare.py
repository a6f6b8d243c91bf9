"""compare / compare_percentile: Welch reference, Fieller coverage, power and A/A rates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from servetune.stats import (
    Verdict,
    compare,
    compare_percentile,
    fieller_ratio_ci,
    verdict,
)


def binomial_tolerance(p: float, n: int, k: float = 3.0) -> float:
    return k * math.sqrt(p * (1 - p) / n)


def test_welch_p_value_matches_the_textbook_formula() -> None:
    base = np.array([100.0, 102.0, 98.5, 101.0, 99.0])
    cand = np.array([104.0, 109.0, 103.5, 107.0])
    vb, vc = base.var(ddof=1) / base.size, cand.var(ddof=1) / cand.size
    t = (cand.mean() - base.mean()) / math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / (base.size - 1) + vc**2 / (cand.size - 1))  # Welch-Satterthwaite
    expected_p = 2 * sps.t.sf(abs(t), df)
    cmp = compare(base, cand, higher_is_better=True)
    assert cmp.p_value == pytest.approx(expected_p, rel=1e-12)
    assert cmp.p_value == pytest.approx(sps.ttest_ind(cand, base, equal_var=False).pvalue, rel=1e-12)
    assert cmp.effect_pct == pytest.approx(100 * (cand.mean() / base.mean() - 1))
    assert (cmp.n_baseline, cmp.n_candidate, cmp.test) == (5, 4, "welch")


def test_fieller_solves_its_defining_equation() -> None:
    a, va, b, vb, t = 110.0, 2.0, 100.0, 1.5, 2.3
    low, high = fieller_ratio_ci(a, va, b, vb, t)
    for rho in (low, high):  # the bounds are where (a - rho b)^2 = t^2 (va + rho^2 vb)
        assert (a - rho * b) ** 2 == pytest.approx(t**2 * (va + rho**2 * vb))
    assert low < a / b < high
    assert fieller_ratio_ci(1.0, 0.1, 0.1, 1.0, 2.0) == (-math.inf, math.inf)  # denominator ~ 0


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 5])
def test_effect_ci_coverage(n: int) -> None:
    """Fieller interval of the % effect, unequal variances: coverage of the true +10 %.

    It must not undercover; with n = 3 Welch's df approximation itself is conservative (about
    0.96), so the reference is the coverage of Welch's interval for the difference on the same data.
    """
    rng = np.random.default_rng(500 + n)
    sims = 2000
    hits = welch_hits = 0
    for _ in range(sims):
        base, cand = rng.normal(100, 2, n), rng.normal(110, 3, n)
        cmp = compare(base, cand, higher_is_better=True)
        hits += cmp.ci_low_pct <= 10.0 <= cmp.ci_high_pct
        welch_hits += sps.ttest_ind(cand - 10.0, base, equal_var=False).pvalue >= 0.05
    tol = binomial_tolerance(0.95, sims)
    assert hits / sims >= 0.95 - tol, hits / sims
    assert abs(hits - welch_hits) / sims <= tol, (hits / sims, welch_hits / sims)
    if n >= 5:
        assert abs(hits / sims - 0.95) <= tol, hits / sims


def test_effect_ci_excludes_zero_exactly_when_welch_rejects() -> None:
    rng = np.random.default_rng(21)
    for _ in range(300):
        cmp = compare(rng.normal(100, 3, 4), rng.normal(rng.uniform(95, 105), 3, 4), higher_is_better=True)
        excludes_zero = not (cmp.ci_low_pct <= 0.0 <= cmp.ci_high_pct)
        assert excludes_zero == (cmp.p_value < 0.05)


@pytest.mark.parametrize("test", ["welch", "permutation"])
def test_detects_a_10_percent_gain_with_5_replicates_and_2_percent_noise(test: str) -> None:
    rng = np.random.default_rng(31)
    sims = 200
    verdicts = [
        verdict(compare(rng.normal(100, 2, 5), rng.normal(110, 2.2, 5), higher_is_better=True, test=test))
        for _ in range(sims)
    ]
    assert verdicts.count(Verdict.better) == sims


def test_detects_a_10_percent_latency_cut_as_better_when_lower_is_better() -> None:
    base, cand = [100.0, 102.0, 98.0, 101.0, 99.0], [90.0, 91.5, 88.0, 90.5, 89.5]
    cmp = compare(base, cand, higher_is_better=False)
    assert cmp.effect_pct == pytest.approx(-10.0, abs=0.5)
    assert cmp.improvement_pct == pytest.approx(10.0, abs=0.5)
    assert verdict(cmp) is Verdict.better
    assert verdict(compare(cand, base, higher_is_better=False)) is Verdict.worse


@pytest.mark.slow
@pytest.mark.parametrize("test", ["welch", "permutation"])
def test_identical_distributions_flagged_at_about_alpha(test: str) -> None:
    rng = np.random.default_rng(41)
    sims = 2000 if test == "welch" else 600
    flagged = sum(
        compare(rng.normal(100, 2, 5), rng.normal(100, 2, 5), higher_is_better=True, test=test,
                seed=int(rng.integers(1 << 30))).p_value < 0.05
        for _ in range(sims)
    )
    assert abs(flagged / sims - 0.05) <= binomial_tolerance(0.05, sims), flagged / sims


def test_permutation_p_value_is_exact_for_small_samples() -> None:
    # 3 vs 3 fully separated: 2 of the C(6,3) = 20 splits are as extreme -> p = 0.1, never below.
    cmp = compare([1.0, 2.0, 3.0], [10.0, 11.0, 12.0], higher_is_better=True, test="permutation")
    assert cmp.p_value == pytest.approx(0.1)
    assert verdict(cmp) is Verdict.no_difference


def test_compare_edge_cases() -> None:
    single = compare([100.0], [110.0, 111.0], higher_is_better=True)
    assert math.isnan(single.p_value) and single.ci_low_pct == -math.inf and single.ci_high_pct == math.inf
    assert verdict(single) is Verdict.no_difference

    same_const = compare([5.0, 5.0, 5.0], [5.0, 5.0], higher_is_better=True)
    assert same_const.p_value == 1.0 and same_const.effect_pct == 0.0
    diff_const = compare([5.0, 5.0, 5.0], [6.0, 6.0], higher_is_better=True)
    assert diff_const.p_value == 0.0 and diff_const.effect_pct == pytest.approx(20.0)
    assert diff_const.ci_low_pct == diff_const.ci_high_pct == pytest.approx(20.0)
    assert verdict(diff_const) is Verdict.better

    zero_base = compare([0.0, 0.0, 0.0], [1.0, 2.0, 1.5], higher_is_better=False)
    assert math.isnan(zero_base.effect_pct) and zero_base.p_value < 0.05
    assert verdict(zero_base) is Verdict.worse  # the sign of the difference still decides

    with pytest.raises(ValueError, match="baseline"):
        compare([1.0, float("nan")], [1.0, 2.0], higher_is_better=True)
    with pytest.raises(ValueError, match="unknown test"):
        compare([1.0, 2.0], [1.0, 3.0], higher_is_better=True, test="bogus")  # type: ignore[arg-type]


def test_comparison_round_trips_through_json() -> None:
    cmp = compare([100.0], [110.0, 111.0], higher_is_better=True)
    again = type(cmp).model_validate_json(cmp.model_dump_json())
    assert again.n_baseline == 1 and again.effect_pct == cmp.effect_pct


# --- percentiles ----------------------------------------------------------------------------------

def _runs(rng: np.random.Generator, scale: float, n_runs: int = 3, n: int = 200) -> list[np.ndarray]:
    return [scale * rng.lognormal(0.0, 0.5, n) for _ in range(n_runs)]


def test_compare_percentile_finds_a_20_percent_p90_increase() -> None:
    rng = np.random.default_rng(51)
    base, cand = _runs(rng, 1.0, n=1000), _runs(rng, 1.2, n=1000)
    cmp = compare_percentile(base, cand, "p90", higher_is_better=False, seed=1)
    assert cmp.statistic == "p90"
    assert cmp.baseline_mean == np.percentile(np.concatenate(base), 90)
    assert cmp.ci_low_pct < 20.0 < cmp.ci_high_pct
    assert cmp.ci_low_pct > 0 and cmp.p_value < 0.05
    assert verdict(cmp) is Verdict.worse


@pytest.mark.slow
def test_compare_percentile_ci_coverage_and_aa_rate() -> None:
    """Iid requests, candidate 10 % slower: coverage of +10 % in the p90 CI; then candidate =
    baseline: how often p < 0.05. The two-level bootstrap is conservative without run effects."""
    rng = np.random.default_rng(61)
    sims = 300
    covered = sum(
        (lambda c: c.ci_low_pct <= 10.0 <= c.ci_high_pct)(
            compare_percentile(_runs(rng, 1.0), _runs(rng, 1.1), "p90", n_boot=500, seed=rng))
        for _ in range(sims)
    )
    assert covered / sims >= 0.95 - binomial_tolerance(0.95, sims), covered / sims
    flagged = sum(
        compare_percentile(_runs(rng, 1.0), _runs(rng, 1.0), "p90", n_boot=500, seed=rng).p_value < 0.05
        for _ in range(sims)
    )
    assert flagged / sims <= 0.05 + binomial_tolerance(0.05, sims), flagged / sims


def test_compare_percentile_run_permutation() -> None:
    rng = np.random.default_rng(71)
    base, cand = _runs(rng, 1.0, n_runs=4, n=300), _runs(rng, 1.5, n_runs=4, n=300)
    cmp = compare_percentile(base, cand, 0.5, test="permutation")
    assert cmp.p_value == pytest.approx(2 / 70)  # C(8,4) = 70 splits, the two extremes
    assert cmp.test == "permutation"
    with pytest.raises(ValueError, match="unknown test"):
        compare_percentile(base, cand, 0.5, test="welch")  # type: ignore[arg-type]


def test_compare_percentile_covers_with_three_runs_whose_levels_differ() -> None:
    """3 vs 3 runs, each run with its own level (sd 0.15 on the log scale against a request spread
    of 0.5), candidate p90 10 % higher: the widened interval covers +10 % at >= 0.93 (unwidened:
    0.90), and its p-value says exactly what the interval says (p < 0.05 iff 0 % is outside)."""
    rng = np.random.default_rng(5)

    def runs(scale: float) -> list[np.ndarray]:
        return [scale * rng.lognormal(rng.normal(0.0, 0.15), 0.5, 200) for _ in range(3)]

    sims = 300
    covered = 0
    for _ in range(sims):
        c = compare_percentile(runs(1.0), runs(1.1), "p90", n_boot=500, seed=rng)
        covered += c.ci_low_pct <= 10.0 <= c.ci_high_pct
        assert (c.p_value < 0.05) == (not c.ci_low_pct <= 0.0 <= c.ci_high_pct), c
    assert covered / sims >= 0.93, covered / sims
