"""A/A calibration: false-positive rates of compare() and of the full decision rule."""

from __future__ import annotations

import numpy as np
import pytest

from servetune.stats import (
    aa_false_positive_rate,
    empirical_sampler,
    normal_sampler,
    rate_interval,
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
