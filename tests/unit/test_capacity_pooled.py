"""The capacity's point estimate pooled over the levels near it (capacity/pooled.py): where a
logistic curve in log(level), fitted to each level's share of values over a percentile SLO's
limit, crosses 1 - XX/100; nothing where the levels do not straddle it; and the estimate using it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit, logit

from servetune.capacity.estimate import estimate
from servetune.capacity.levels import LevelResult, LevelSample, judge_level
from servetune.capacity.pooled import LevelValues, crossing
from servetune.capacity.sequential import Looks
from servetune.capacity.slo import parse_slo

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
