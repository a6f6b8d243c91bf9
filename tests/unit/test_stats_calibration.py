"""A/A calibration: false-positive rates of compare() and of the full decision rule."""

from __future__ import annotations

import numpy as np
import pytest

from servetune.stats import (
    aa_boot_calibration,
    aa_false_positive_rate,
    empirical_sampler,
    normal_sampler,
    rate_interval,
    simulate_boot_false_positive_rate,
    simulate_false_positive_rate,
)


def test_rate_interval_is_clopper_pearson() -> None:
    r = rate_interval(5, 100, method="x")
    assert r.estimate == 0.05
    assert (r.low, r.high) == pytest.approx((0.0164, 0.1128), abs=1e-4)  # exact binomial 95 % CI
    assert rate_interval(0, 50, method="x").low == 0.0


@pytest.mark.slow
def test_aa_resplit_on_same_distribution_is_near_alpha() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(100, 2, 20), rng.normal(100, 2, 20)
    rate = aa_false_positive_rate(a, b, n_splits=1000, seed=1)
    assert rate.n == 1000
    assert rate.low <= 0.05 <= rate.high, rate


def test_aa_resplit_enumerates_small_pools_exactly() -> None:
    rate = aa_false_positive_rate([100.0, 101.0, 99.0], [100.5, 99.5, 100.2])
    assert rate.n == 20  # C(6, 3)
    # only the two splits that keep each tight cluster together are significant
    separated = aa_false_positive_rate([1.0, 1.01, 1.02], [5.0, 5.01, 5.02])
    assert separated.estimate == pytest.approx(2 / 20)


@pytest.mark.slow
def test_full_rule_false_winner_rate_under_alpha() -> None:
    """Three candidates identical to the baseline, adaptive replication (3..5), Welch, Holm:
    the chance that *some* candidate is declared a winner stays below alpha = 0.05."""
    rate = simulate_false_positive_rate(normal_sampler(100.0, 0.02), n_candidates=3, min_reps=3,
                                        max_reps=5, n_experiments=1000, seed=3)
    assert rate.estimate <= 0.05, rate


@pytest.mark.slow
def test_full_rule_one_candidate_fixed_replicates_is_nominal() -> None:
    """No adaptive stopping (min = max = 5), one candidate: any verdict other than no_difference
    happens at the test's alpha."""
    rate = simulate_false_positive_rate(normal_sampler(100.0, 0.02), min_reps=5, max_reps=5,
                                        count="any", n_experiments=1500, seed=4)
    assert rate.low <= 0.05 <= rate.high, rate


@pytest.mark.slow
def test_full_rule_on_an_empirical_noise_distribution() -> None:
    measured = [812.0, 798.5, 805.2, 790.1, 820.4, 801.7, 808.8, 795.0]  # replicate throughputs
    rate = simulate_false_positive_rate(empirical_sampler(measured), n_candidates=2, min_reps=3,
                                        max_reps=5, n_experiments=500, seed=5)
    assert rate.estimate <= 0.05 + 3 * (0.05 * 0.95 / 500) ** 0.5, rate


def test_simulation_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        simulate_false_positive_rate(normal_sampler(1.0, 0.1), n_experiments=0)
    with pytest.raises(ValueError):
        empirical_sampler([1.0])


def _tolerance(n: int, p: float = 0.05) -> float:
    return 3 * (p * (1 - p) / n) ** 0.5


@pytest.mark.parametrize("candidate_boots", [1, 2])
def test_boot_model_keeps_false_verdicts_at_alpha_when_boots_vary(candidate_boots: int) -> None:
    """Boots differ (sd 10 % on the log scale) more than replicates (5 %), as on a shared CPU box;
    three candidates identical to a baseline of three boots. Judged as a study judges (two-level
    model, Holm), any verdict (better/worse, or promising/not_promising for one-boot candidates)
    stays at alpha; pooling replicates as if boots did not exist calls a difference in most studies."""
    kwargs = {"baseline_boots": 3, "candidate_boots": candidate_boots, "n_candidates": 3, "n_experiments": 600,
              "seed": 11}
    boots = simulate_boot_false_positive_rate(0.10, 0.05, **kwargs)
    assert boots.estimate <= 0.05 + _tolerance(600), boots
    replicates = simulate_boot_false_positive_rate(0.10, 0.05, model="replicates", **kwargs)
    assert replicates.estimate > 0.3, replicates


def _null_boots(rng: np.random.Generator, n: int, boot_sd: float = 0.1, rep_sd: float = 0.05) -> list[list[float]]:
    return [list(800.0 * np.exp(rng.normal(0.0, boot_sd) + rng.normal(0.0, rep_sd, 3))) for _ in range(n)]


def test_aa_boot_calibration_forms_disjoint_comparisons_on_their_own_boots() -> None:
    boots = _null_boots(np.random.default_rng(2), 41)   # an odd boot out is left over
    cal = aa_boot_calibration(boots)
    assert len(cal.single) == 20 and len(cal.paired) == 10
    assert all((c.n_baseline, c.n_candidate) == (1, 1) for c, _ in cal.single)
    assert all((c.n_baseline, c.n_candidate) == (2, 2) for c, _ in cal.paired)
    assert {lab for _, lab in cal.single} <= {"promising", "not_promising", "no_difference"}
    assert {lab for _, lab in cal.paired} <= {"better", "worse", "no_difference"}
    # pair 0 is boot 0 against boot 1, quad 0 is boots 0 and 2 against 1 and 3 (geometric means)
    geo = [float(np.exp(np.log(b).mean())) for b in boots]
    assert cal.single[0][0].candidate_mean == pytest.approx(geo[1])
    assert cal.paired[0][0].candidate_mean == pytest.approx(float(np.sqrt(geo[1] * geo[3])))
    assert cal.components.boot_df == 40 and cal.any_rate.n == 30


def test_aa_boot_calibration_rates_near_alpha_on_null_boots_and_high_on_a_real_effect() -> None:
    """Many simulated calibrations of 40 null boots: the pooled rate of any verdict is at most
    alpha. The same boots with every second one 60 % faster: the two-against-two comparisons
    (judged on their own four boots) catch it; the one-against-one do not need to, as they borrow
    the boot variance from all the other boots, which then carry the effect too."""
    rng = np.random.default_rng(9)
    hits = total = 0
    caught = []
    for _ in range(40):
        boots = _null_boots(rng, 40)
        rate = aa_boot_calibration(boots).any_rate
        hits, total = hits + round(rate.estimate * rate.n), total + rate.n
        shifted = [[v * (1.6 if i % 2 else 1.0) for v in b] for i, b in enumerate(boots)]
        caught.append(aa_boot_calibration(shifted).paired_rate.estimate)
    assert hits / total <= 0.05 + _tolerance(total), hits / total
    assert np.mean(caught) > 0.5, np.mean(caught)
