"""Boots nested in configs: coverage of log-scale effects, A/A verdict rate, power against brute force,
positive intervals, and percentile intervals that cover with 3 runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from servetune import stats
from servetune.stats import (
    VarianceComponents,
    boots_needed,
    compare_boots,
    detectable_effect_pct,
    hierarchical_bootstrap_ci,
    log_t_ci,
    variance_components,
)
from servetune.stats.multiple import holm

BOOT_SD, REP_SD = 0.06, 0.02   # log scale; boot means spreading about 0.87-1.09 over a handful of boots


def binomial_tolerance(p: float, n: int, k: float = 3.0) -> float:
    return k * math.sqrt(p * (1 - p) / n)


def _config(rng: np.random.Generator, level: float, boots: int, reps: int,
            boot_sd: float = BOOT_SD, rep_sd: float = REP_SD) -> list[list[float]]:
    return [list(np.exp(level + rng.normal(0, boot_sd) + rng.normal(0, rep_sd, reps))) for _ in range(boots)]


def test_variance_components_recover_the_simulated_ones() -> None:
    rng = np.random.default_rng(1)
    groups = [_config(rng, rng.normal(0, 0.2), boots=4, reps=3) for _ in range(60)]
    c = variance_components(groups)
    assert c.boot_df == 60 * 3 and c.rep_df == 240 * 2
    assert math.sqrt(c.boot_var) == pytest.approx(BOOT_SD, rel=0.15)
    assert math.sqrt(c.rep_var) == pytest.approx(REP_SD, rel=0.1)


def test_boot_variance_is_unknown_without_a_config_booted_twice() -> None:
    c = variance_components([[[1.0, 1.1]], [[2.0, 2.1, 2.2]]])
    assert c.boot_df == 0 and math.isnan(c.boot_var) and not c.known


@pytest.mark.slow
@pytest.mark.parametrize(("base_boots", "cand_boots"), [(3, 1), (3, 2)])
def test_log_effect_ci_coverage_two_level(base_boots: int, cand_boots: int) -> None:
    """True +10 % between configs, boot and replicate noise, components estimated from a study of
    6 configs (baseline re-measured): the 95 % CI of the effect covers +10 % at nominal rate and
    never reaches below -100 %."""
    rng = np.random.default_rng(5)
    true = math.log(1.10)
    sims, hits = 600, 0
    for _ in range(sims):
        base = _config(rng, 0.0, base_boots, 2)
        cand = _config(rng, true, cand_boots, 2)
        others = [_config(rng, rng.normal(0, 0.1), 2, 2) for _ in range(2)] + \
                 [_config(rng, rng.normal(0, 0.1), 1, 2) for _ in range(2)]
        comp = compare_boots(base, cand, variance_components([base, cand, *others]), higher_is_better=True)
        assert comp.ci_low_pct > -100.0
        hits += comp.ci_low_pct <= 10.0 <= comp.ci_high_pct
    assert hits / sims >= 0.95 - binomial_tolerance(0.95, sims), hits / sims


@pytest.mark.slow
def test_aa_two_level_study_gives_verdicts_at_most_at_alpha() -> None:
    """Every config equal: a baseline booted 3 times, five single-boot candidates and one re-validated
    (2 boots). The rate of studies with any label but no_difference (promising, not promising,
    better, worse) must stay at or below alpha, Holm across the candidates."""
    rng = np.random.default_rng(9)
    sims, flagged, alpha = 1000, 0, 0.05
    for _ in range(sims):
        base = _config(rng, 0.0, 3, 2)
        cands = [_config(rng, 0.0, 1, 2) for _ in range(5)] + [_config(rng, 0.0, 2, 2)]
        comps = variance_components([base, *cands])
        cmps = [compare_boots(base, c, comps, higher_is_better=True) for c in cands]
        adjusted = holm([c.p_value for c in cmps])
        labels = [stats.label(stats.verdict(c, alpha, float(p)), min(len(cand), len(base)))
                  for c, p, cand in zip(cmps, adjusted, cands)]
        flagged += any(lab != "no_difference" for lab in labels)
    assert flagged / sims <= alpha + binomial_tolerance(alpha, sims, 2.0), flagged / sims


def test_a_single_boot_is_never_better_or_worse() -> None:
    assert stats.label(stats.Verdict.better, 1) == "promising"
    assert stats.label(stats.Verdict.worse, 1) == "not_promising"
    assert stats.label(stats.Verdict.no_difference, 1) == "no_difference"
    assert stats.label(stats.Verdict.better, 2) == "better"


@pytest.mark.slow
def test_power_matches_brute_force_simulation() -> None:
    """At the effect detectable_effect_pct names, a simulation of the two-level data judged by
    compare_boots (components known, as in a study that pooled many boots) rejects about 90 % of the time."""
    components = VarianceComponents(boot_var=BOOT_SD**2, rep_var=REP_SD**2, boot_df=10**6, rep_df=10**6,
                                    boot_mean_var=BOOT_SD**2 + REP_SD**2 / 2, mean_inv_reps=0.5)
    effect = detectable_effect_pct(components, replicates=2, boots=3, alpha=0.05, power=0.9)
    rng = np.random.default_rng(21)
    sims = 2000
    rejected = sum(
        compare_boots(_config(rng, 0.0, 3, 2), _config(rng, math.log1p(effect / 100), 3, 2), components,
                      higher_is_better=True).p_value < 0.05
        for _ in range(sims)
    )
    assert abs(rejected / sims - 0.9) <= binomial_tolerance(0.9, sims), (effect, rejected / sims)
    need = boots_needed(components, effect_pct=10.0, replicates=2)
    assert need is not None
    assert detectable_effect_pct(components, replicates=2, boots=need) <= 10.0
    assert detectable_effect_pct(components, replicates=2, boots=need - 1) > 10.0


def test_power_is_unknown_without_boot_variance() -> None:
    c = variance_components([[[1.0, 1.1]]])
    assert math.isnan(detectable_effect_pct(c, replicates=2, boots=1)) and boots_needed(c, replicates=2) is None


# --- intervals that respect the quantity ---------------------------------------------------------

def test_log_t_interval_of_two_skewed_replicates_stays_positive() -> None:
    """Two replicates of a time, 0.2 and 2.3 ms: the symmetric t-interval reaches below 0, log-t cannot."""
    assert stats.mean_ci([0.2, 2.3]).low < 0
    ci = log_t_ci([0.2, 2.3])
    assert 0 < ci.low < ci.estimate < ci.high and ci.estimate == pytest.approx(1.25)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_log_t_interval_coverage_of_lognormal_replicates(n: int) -> None:
    """Replicates of a skewed positive quantity (log-normal, sd 0.3): the interval around the mean
    covers the true mean at the nominal rate."""
    rng = np.random.default_rng(n)
    true_mean = math.exp(0.3**2 / 2)
    sims = 3000
    hits = sum(log_t_ci(rng.lognormal(0.0, 0.3, n)).contains(true_mean) for _ in range(sims))
    assert abs(hits / sims - 0.95) <= binomial_tolerance(0.95, sims), hits / sims


@pytest.mark.slow
def test_percentile_interval_covers_with_three_runs_that_differ() -> None:
    """Runs with their own level (sd 0.15 on the log scale, request spread 0.5), 3 runs: the widened
    two-level bootstrap covers the population p90 at >= 0.93 (the plain one: about 0.82)."""
    rng = np.random.default_rng(17)
    true = sps.lognorm(s=math.hypot(0.5, 0.15)).ppf(0.9)
    sims = 400
    hits = sum(
        hierarchical_bootstrap_ci([rng.lognormal(rng.normal(0.0, 0.15), 0.5, 200) for _ in range(3)], "p90",
                                  n_boot=500, seed=rng).contains(true)
        for _ in range(sims)
    )
    assert hits / sims >= 0.93, hits / sims


def test_single_replicate_boots_still_give_the_boot_variance() -> None:
    """`replicates: 1`: no within-boot spread, but boot means of a config booted twice carry both levels."""
    c = variance_components([[[1.0], [1.1]], [[2.0]]])
    assert c.known and c.boot_df == 1 and c.rep_df == 0
    assert c.boot_var == pytest.approx(np.var(np.log([1.0, 1.1]), ddof=1))
    comp = compare_boots([[1.0], [1.1]], [[2.0]], c, higher_is_better=True)
    assert comp.p_value > 0.05 and comp.ci_low_pct > -100.0
