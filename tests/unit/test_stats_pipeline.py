"""The finalist test calibrated for the selection (stats/pipeline.py): its simulation computes the
statistic compare_boots computes, holds the false-winner rate where a plain t-test does not, and
gives the same answer for the same design."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from servetune import stats
from servetune.stats import pipeline
from servetune.stats.pipeline import Design, Race, calibrated_p, critical_level, critical_t, simulate


def test_the_simulated_t_is_the_one_compare_boots_computes() -> None:
    rng = np.random.default_rng(3)
    base = [[float(np.exp(rng.normal(0, 0.05)))] for _ in range(3)]
    finalists = [[[float(np.exp(rng.normal(0.02, 0.05)))] for _ in range(n)] for n in (2, 3)]
    screened = [[float(np.exp(rng.normal(0, 0.05)))]]   # one boot: no boot-level df
    c = stats.variance_components([base, *finalists, screened])
    expected = [d / se for d, se in (stats.log_difference(base, f, c) for f in finalists)]

    logs = lambda boots: np.log([b[0] for b in boots])  # noqa: E731
    s1 = np.array([[logs(f).sum() for f in finalists]])
    s2 = np.array([[(logs(f) ** 2).sum() for f in finalists]])
    cnt = np.array([[2.0, 3.0]])
    b = logs(base)
    sums = pipeline._Sums(np.array([b.sum()]), np.array([(b**2).sum()]), np.array([float(b.size)]))
    t, _, _, df = pipeline._t_of_finalists(sums, s1, s2, cnt, np.array([[True, True]]), np.zeros(1))
    assert t[0] == pytest.approx(expected)
    assert df[0] == c.boot_df == 2 + 1 + 2


def test_the_selection_inflates_a_plain_t_test_and_the_calibrated_level_holds_alpha() -> None:
    # 5 candidates screened on one boot, the best 2 re-validated on one fresh boot each, the
    # screening boot reused: under the null a plain one-sided t-test at 5 % names far more winners.
    n = 40_000
    sim = simulate(np.random.default_rng(11), m=5, k=2, b0=1, fresh=1, extra=0, reps=1, sd_ratio=0.0,
                   effects=np.zeros(5), n=n)
    plain = float(np.mean(sim.min_p <= 0.05))
    calibrated = float(np.mean(sim.min_p <= critical_level(Design(5, 2), 0.05)))
    assert plain > 0.08
    upper = sps.binomtest(int(calibrated * n), n).proportion_ci(0.95, method="exact").high
    assert calibrated > 0.04 and upper <= 0.055


def test_the_same_design_gives_the_same_critical_level() -> None:
    design = Design(8, 2, baseline_screen_boots=2, extra_looks=3)
    first = critical_level(design, 0.05)
    pipeline._null_min_p.cache_clear()
    assert critical_level(design, 0.05) == first
    assert critical_level(Design(8, 2, baseline_screen_boots=2, extra_looks=0), 0.05) > first   # more looks: stricter


def test_calibrated_p_is_under_alpha_exactly_from_the_critical_t_on() -> None:
    design, df = Design(5, 2, extra_looks=2), 4
    t = critical_t(critical_level(design, 0.05), df)
    assert calibrated_p(t * 1.01, df, design) <= 0.05 < calibrated_p(t * 0.99, df, design)
    assert calibrated_p(-t * 1.01, df, design) <= 0.05   # either sign: conservative for "worse"
    assert math.isnan(calibrated_p(2.0, 0, design))


def test_the_least_favourable_replicate_ratio_is_zero() -> None:
    levels = [critical_level(Design(5, 2, replicates=3, sd_ratio=r), 0.05) for r in (0.0, 1.0, 10.0)]
    assert levels[0] < levels[1] < levels[2]
    assert Design(5, 2, replicates=3, sd_ratio=0.0).key() == Design(5, 2).key()


def test_what_the_next_boot_pair_buys_grows_with_the_boots() -> None:
    level = critical_level(Design(5, 2, extra_looks=3), 0.05)
    now = pipeline.detection_power(math.log(1.2), 0.06, (2, 3), (2, 3), 3, level)
    next_pair = pipeline.detection_power(math.log(1.2), 0.06, (2, 3), (3, 4), 3, level)
    at_cap = pipeline.detection_power(math.log(1.2), 0.06, (2, 3), (5, 6), 3, level)
    assert now < next_pair < at_cap
    assert math.isnan(pipeline.detection_power(math.log(1.2), 0.0, (2, 3), (3, 4), 3, level))


def test_racing_in_the_simulation_stops_clearly_worse_candidates_and_leaves_equal_ones() -> None:
    race = Race(z=2.576, margin=0.167)   # 99 %, a 1 % minimum effect over a 6 % boot sd
    _, stopped, lost = race.screen(np.random.default_rng(1), np.full(5, -8.5), np.zeros(2000), 1, 1.0, 3, 2000)
    assert stopped.mean() > 0.99 and abs(lost.mean() - 2 * 5 * stopped.mean()) < 0.2   # after their first replicate
    _, stopped, _ = race.screen(np.random.default_rng(2), np.zeros(5), np.zeros(2000), 1, 1.0, 3, 2000)
    assert stopped.mean() < 0.01


def test_racing_and_short_screening_leave_the_plain_simulation_as_it_was() -> None:
    plain = simulate(np.random.default_rng(3), m=5, k=2, b0=1, fresh=1, extra=0, reps=3, sd_ratio=1.0,
                     effects=np.zeros(5), n=500)
    same = simulate(np.random.default_rng(3), m=5, k=2, b0=1, fresh=1, extra=0, reps=3, sd_ratio=1.0,
                    effects=np.zeros(5), n=500, screen_ratio=1.0)
    assert np.array_equal(plain.min_p, same.min_p)
    raced = simulate(np.random.default_rng(3), m=5, k=2, b0=1, fresh=1, extra=0, reps=3, sd_ratio=1.0,
                     effects=np.full(5, -8.5), n=500, race=Race(z=2.576, margin=0.167))
    assert (raced.who == -1).mean() > 0.99   # every candidate stopped: no finalist, no winner
