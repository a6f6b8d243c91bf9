"""The Pareto front with intervals (report/pareto.py): dominance needs estimates at least as good on
both axes and intervals apart on one; overlapping intervals keep a config on the front as tied."""

from __future__ import annotations

import math

import pytest

from servetune.analysis.types import Estimate
from servetune.report import pareto
from servetune.report.pareto import Axis, Point, Standing

THROUGHPUT, LATENCY = Axis("output_throughput"), Axis("p99_ttft_ms")


def _e(estimate: float, low: float = math.nan, high: float = math.nan, censored: str = "") -> Estimate:
    return Estimate(estimate, low, high, 4, censored)


def _point(label: str, latency: Estimate, throughput: Estimate) -> Point:
    return Point(label, label, latency, throughput)


def _standings(points: list[Point], x: Axis = LATENCY, y: Axis = THROUGHPUT) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {r.point.label: (r.standing, r.dominated_by) for r in pareto.rank(points, x, y)}


def test_a_config_beaten_on_both_axes_by_intervals_apart_is_dominated() -> None:
    fast = _point("fast", _e(50, 45, 55), _e(100, 95, 105))
    slow = _point("slow", _e(60, 56, 65), _e(80, 75, 85))
    assert _standings([fast, slow]) == {"fast": (Standing.front, ()), "slow": (Standing.dominated, ("fast",))}


def test_overlapping_intervals_on_both_axes_leave_the_beaten_config_tied_not_dominated() -> None:
    a = _point("a", _e(50, 40, 60), _e(100, 90, 110))
    b = _point("b", _e(55, 45, 65), _e(95, 85, 105))   # worse estimates on both, intervals overlapping a's
    assert _standings([a, b]) == {"a": (Standing.front, ()), "b": (Standing.tied, ())}


def test_apart_on_one_axis_with_an_estimate_no_better_on_the_other_dominates() -> None:
    a = _point("a", _e(50, 40, 60), _e(100, 95, 105))
    b = _point("b", _e(52, 42, 62), _e(80, 75, 85))    # throughput apart, latency overlapping and worse
    assert _standings([a, b])["b"] == (Standing.dominated, ("a",))


def test_a_trade_off_keeps_both_on_the_front() -> None:
    a = _point("a", _e(60, 50, 70), _e(100, 95, 105))  # more throughput, apart
    b = _point("b", _e(55, 45, 65), _e(80, 75, 85))    # lower latency by its estimate
    assert _standings([a, b]) == {"a": (Standing.front, ()), "b": (Standing.front, ())}


def test_a_value_without_an_interval_is_never_apart() -> None:
    a = _point("a", _e(50), _e(100))
    b = _point("b", _e(60), _e(80))                     # worse on both estimates, no interval anywhere
    assert _standings([a, b])["b"] == (Standing.tied, ())


def test_a_censored_capacity_is_open_on_its_unknown_side() -> None:
    capacity, memory = Axis("capacity"), Axis(pareto.KV_CACHE_GIB)
    at_least = Point("big", "big", _e(2.0, 2.0, 2.0), _e(10.0, censored="right"))   # met at the top level
    small = Point("small", "small", _e(2.0, 2.0, 2.0), _e(5.0, 4.0, 6.0))
    assert _standings([at_least, small], memory, capacity)["small"] == (Standing.dominated, ("big",))
    # an upper bound (failed at its first level) is open below: "at most 3" is apart from 5 [4, 6]
    # but not from 2.5 [2, 3.5], whose interval reaches above it
    at_most = _e(3.0, censored="left")
    assert pareto.interval(at_most) == (-math.inf, 3.0)
    assert pareto.apart(small.y, at_most, higher=True) and not pareto.apart(at_most, small.y, higher=True)
    assert not pareto.apart(_e(2.5, 2.0, 3.5), at_most, higher=True)


def test_directions_follow_the_metric() -> None:
    assert Axis("output_throughput").higher_is_better and Axis("request_goodput").higher_is_better
    assert not Axis("p90_ttft_ms").higher_is_better and not Axis(pareto.KV_CACHE_GIB).higher_is_better
    assert not Axis(pareto.JOULES_PER_TOKEN).higher_is_better and Axis(pareto.OBJECTIVE).higher_is_better
    # lower is better on x: the faster of two equal-throughput configs dominates once apart
    quick = _point("quick", _e(20, 18, 22), _e(100, 95, 105))
    sluggish = _point("sluggish", _e(40, 38, 42), _e(100, 95, 105))
    assert _standings([quick, sluggish])["sluggish"] == (Standing.dominated, ("quick",))


@pytest.mark.parametrize(("name", "problem"), [
    ("p99_ttft_ms", None), ("objective", None), ("kv_cache_gib", None), ("joules_per_token", None),
    ("p99_ttfy_ms", "did you mean 'p99_ttft_ms'"), ("kv_cache_gb", "did you mean 'kv_cache_gib'"),
])
def test_axis_names_are_checked_with_a_suggestion(name: str, problem: str | None) -> None:
    found = pareto.axis_problem(name)
    assert found is None if problem is None else problem in (found or "")


def test_default_axes_take_two_profiles_objectives_else_a_latency_slo_and_the_objective() -> None:
    assert pareto.default_axes("output_throughput", ["p90_ttft_ms"]) == ("p90_ttft_ms", "output_throughput")
    assert pareto.default_axes("mean_ttft_ms", []) == ("p99_e2el_ms", "output_throughput")
    # the profiles' metrics, the lower-is-better one on x
    assert pareto.default_axes("output_throughput", ["p90_ttft_ms"], ["request_throughput", "mean_tpot_ms"]) == (
        "mean_tpot_ms", "request_throughput")
