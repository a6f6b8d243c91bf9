"""The capacity's point estimate pooled over the levels near it (capacity/pooled.py): where a
logistic curve in log(level), fitted to each level's share of values over a percentile SLO's
limit, crosses 1 - XX/100; nothing where the levels do not straddle it; Fieller's interval of
that crossing; and the estimate using both."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, logit

from servetune.capacity.estimate import FIT, estimate
from servetune.capacity.levels import LevelResult, LevelSample, judge_level
from servetune.capacity.pooled import DISPERSION, LevelValues, crossing, fitted_crossing
from servetune.capacity.sequential import Looks
from servetune.capacity.slo import Verdict, parse_slo

P99 = parse_slo("ttft:p99=100")
TRUE_CAPACITY = 50.0
SLOPE = 12.0   # of the share's logit per unit of log(level)


def share_over(level: float) -> float:
    """A share of values over the limit that crosses 1 % at TRUE_CAPACITY."""
    return float(expit(logit(0.01) + SLOPE * math.log(level / TRUE_CAPACITY)))


def values_at(level: float, n: int = 4000) -> list[np.ndarray]:
    """n values (ms) of which round(n * share_over(level)) lie over the 100 ms limit."""
    over = round(n * share_over(level))
    return [np.concatenate([np.full(n - over, 50.0), np.full(over, 150.0)])]


def test_the_crossing_of_the_fitted_share_is_where_it_reaches_one_percent() -> None:
    levels = [LevelValues(x, values_at(x)) for x in (40.0, 46.0, 53.0, 60.0)]
    found = crossing(P99, levels, center=53.0)
    assert found == pytest.approx(TRUE_CAPACITY, rel=0.01)


def test_levels_far_from_the_first_guess_are_left_out_of_the_fit() -> None:
    near = [LevelValues(x, values_at(x)) for x in (44.0, 48.0, 53.0, 58.0)]
    # far under the crossing the share sits at a floor the straight logit cannot follow
    floor = [LevelValues(x, [np.concatenate([np.full(3990, 50.0), np.full(10, 150.0)])]) for x in (5.0, 10.0)]
    assert crossing(P99, floor + near, center=50.0) == pytest.approx(crossing(P99, near, center=50.0))


def test_no_crossing_without_levels_on_both_sides_or_for_a_mean() -> None:
    under = [LevelValues(x, values_at(x)) for x in (30.0, 40.0, 45.0)]
    assert crossing(P99, under, center=45.0) is None            # every share under 1 %: no extrapolation
    assert crossing(parse_slo("ttft:mean=100"), [LevelValues(x, values_at(x)) for x in (40.0, 60.0)], 50.0) is None
    assert crossing(P99, [LevelValues(50.0, values_at(50.0))], center=50.0) is None   # one level: no slope


def test_requests_in_flight_when_a_run_was_lost_count_over_the_limit() -> None:
    levels = [LevelValues(40.0, values_at(40.0)), LevelValues(60.0, values_at(60.0))]
    cut = [levels[0], LevelValues(60.0, levels[1].values, unfinished=400)]
    assert crossing(P99, cut, 50.0) < crossing(P99, levels, 50.0)   # type: ignore[operator]


def test_the_estimate_takes_the_pooled_crossing_between_the_decided_ends() -> None:
    looks = Looks(0.05, 5, 3)

    def level(x: float) -> LevelResult:
        return judge_level(x, [LevelSample(x, {"ttft": values_at(x)}, 4000, 4000)], [P99], looks)

    levels = [level(x) for x in (25.0, 44.0, 62.0, 100.0)]
    est = estimate(levels)
    assert est.low <= est.capacity <= est.high
    assert est.capacity == pytest.approx(TRUE_CAPACITY, rel=0.01)
    # the p99s of the two adjacent levels (50 and 150 ms) would have put it at their midpoint, 53
    assert abs(est.capacity - (44.0 + 62.0) / 2) > 2


def spread_values(level: float, n: int = 4000) -> list[np.ndarray]:
    """As values_at, the values over the limit spread evenly through the run (no slow spell)."""
    over = round(n * share_over(level))
    values = np.full(n, 50.0)
    values[np.linspace(0, n - 1, over).round().astype(int)] = 150.0
    return [values]


def test_fiellers_interval_is_where_the_fitted_logit_is_within_z_standard_errors() -> None:
    """Two levels: the fit passes through both shares, so its coefficients and covariance are
    known in closed form; the interval's ends are where (b0 + b1 x - logit 1 %)^2 = z^2 Var."""
    lo_level, hi_level, n = 44.0, 58.0, 4000
    found = fitted_crossing(P99, [LevelValues(x, spread_values(x, n)) for x in (lo_level, hi_level)], 50.0, 0.05)
    assert found is not None
    ref = math.sqrt(lo_level * hi_level)
    x = np.log(np.array([lo_level, hi_level]) / ref)
    p = np.array([round(n * share_over(lv)) / n for lv in (lo_level, hi_level)])
    slope = (logit(p[1]) - logit(p[0])) / (x[1] - x[0])
    intercept = logit(p[0]) - slope * x[0]
    design = np.column_stack([np.ones(2), x])
    cov = DISPERSION * np.linalg.inv(design.T @ (design * (n * p * (1 - p))[:, None]))
    grid = np.linspace(-0.3, 0.3, 60001)
    inside = (intercept + slope * grid - logit(0.01)) ** 2 <= stats.norm.ppf(0.975) ** 2 * (
        cov[0, 0] + 2 * grid * cov[0, 1] + grid ** 2 * cov[1, 1])
    assert found.low == pytest.approx(ref * math.exp(grid[inside].min()), rel=1e-4)
    assert found.high == pytest.approx(ref * math.exp(grid[inside].max()), rel=1e-4)
    assert found.low < TRUE_CAPACITY < found.high


def test_the_interval_narrows_with_more_values_and_widens_with_a_smaller_alpha() -> None:
    xs = (40.0, 46.0, 53.0, 60.0)

    def width(n: int, alpha: float) -> float:
        found = fitted_crossing(P99, [LevelValues(x, spread_values(x, n)) for x in xs], 50.0, alpha)
        assert found is not None and found.low < found.point < found.high
        return math.log(found.high / found.low)

    assert 0.4 < width(16000, 0.05) / width(4000, 0.05) < 0.6   # four times the values: half the width
    assert width(4000, 0.01) > width(4000, 0.05)


def test_values_over_the_limit_that_come_in_a_spell_widen_the_interval() -> None:
    """The same counts, spread evenly or together at each run's end: the spell's design effect
    (slo.tail_effective_size) shrinks each level's information, so the interval is wider."""
    xs = (40.0, 46.0, 53.0, 60.0)
    spread = fitted_crossing(P99, [LevelValues(x, spread_values(x)) for x in xs], 50.0, 0.05)
    spell = fitted_crossing(P99, [LevelValues(x, values_at(x)) for x in xs], 50.0, 0.05)
    assert spread is not None and spell is not None and spread.point == pytest.approx(spell.point)
    assert spell.low < spread.low < spread.high < spell.high


def test_the_interval_is_open_where_the_slope_is_not_clearly_positive() -> None:
    # 400 values a level: 3 and 5 over the limit; a crossing between them, but no slope to trust
    found = fitted_crossing(P99, [LevelValues(x, spread_values(x, 400)) for x in (49.0, 51.0)], 50.0, 0.05)
    assert found is not None and 49.0 <= found.point <= 51.0
    assert (found.low, found.high) == (0.0, math.inf)


def test_the_fit_sets_the_interval_where_no_level_is_met() -> None:
    """Levels near the crossing, each undecided or violated by its own statistic: without a met
    level the verdicts leave the low end at 0; the fit across them bounds it."""
    looks = Looks(0.05, 5, 3)
    levels = [judge_level(x, [LevelSample(x, {"ttft": spread_values(x)}, 4000, 4000)], [P99], looks)
              for x in (49.0, 50.0, 51.0, 53.0, 55.0)]
    assert not any(r.verdict is Verdict.meets for r in levels)
    est = estimate(levels)
    assert est.low_by == est.high_by == FIT
    assert 0 < est.low < TRUE_CAPACITY < est.high < 53.0   # inside the verdicts' [0, 53]
    assert est.low < est.capacity < est.high
