"""The capacity search on a simulated server of known capacity (tests/fakes/queue_model.py, no
HTTP): estimate within 10 % of the truth, interval covering it in >= 90 % of repeated searches,
early stops that save requests without losing the answer, and the monitor's saturation call."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from servetune.capacity.estimate import estimate
from servetune.capacity.levels import LevelSample, Measure
from servetune.capacity.monitor import LevelMonitor
from servetune.capacity.search import SearchResult, SearchSettings, search
from servetune.capacity.slo import Slo, Verdict, parse_slo
from tests.fakes.queue_model import QueueModel, simulated_measure

MODEL = QueueModel(slots=16, prefill_ms=20.0, itl_ms=10.0, output_len=8)   # saturates at 178 req/s
SLOS = [parse_slo("ttft:p99=100")]
N = 1000            # requests a run
SEARCHES = 100
SETTINGS = SearchSettings(start=5.0, min_level=0.5, max_level=500.0)


@pytest.fixture(scope="module")
def truth() -> float:
    """The rate at which p99 TTFT over runs of N requests crosses 100 ms: 300 runs a rate."""
    return MODEL.true_crossing(0.99, 100.0, N, runs=300)


@pytest.fixture(scope="module")
def searches() -> list[SearchResult]:
    return [search(simulated_measure(MODEL, SLOS, N, SETTINGS.alpha, seed, looks=SETTINGS.looks), SLOS, SETTINGS)
            for seed in range(SEARCHES)]


@pytest.mark.slow
def test_estimates_are_within_ten_percent_of_the_true_capacity(searches: list[SearchResult], truth: float) -> None:
    assert 0.75 * MODEL.saturation_rate < truth < 0.9 * MODEL.saturation_rate  # a crossing before the runaway
    errors = np.array([abs(estimate(r.levels).capacity / truth - 1) for r in searches])
    # a run's p99 near capacity swings by tens of percent (one slow spell or none), so a search
    # can be unlucky at every run of a level; its interval then stays wide (next test)
    assert np.mean(errors <= 0.10) >= 0.95 and np.median(errors) <= 0.05, sorted(errors)[-5:]


@pytest.mark.slow
def test_intervals_cover_the_true_capacity_in_ninety_percent_of_searches(searches: list[SearchResult], truth: float) -> None:
    ests = [estimate(r.levels) for r in searches]
    assert all(e.low < e.capacity <= e.high for e in ests)
    covered = sum(e.low <= truth <= e.high for e in ests)
    assert covered >= 0.9 * SEARCHES, covered


@pytest.mark.slow
def test_early_stops_save_requests_and_keep_the_answer(searches: list[SearchResult], truth: float) -> None:
    stopped = [lv for r in searches for lv in r.levels if lv.stopped]
    assert len(stopped) >= len(searches)   # every search ends some level early
    runs = [smp for lv in stopped for smp in lv.samples if smp.stopped]
    assert all(smp.completed < N for smp in runs)   # stopped before the last request ended
    # the clear losses (far above capacity) end within the first fifth of their run
    assert min(smp.sent for smp in runs) < N / 5
    full = [search(simulated_measure(MODEL, SLOS, N, SETTINGS.alpha, s, early_stop=False, looks=SETTINGS.looks),
                   SLOS, SETTINGS) for s in range(20)]
    err_full = np.median([abs(estimate(r.levels).capacity / truth - 1) for r in full])
    err_early = np.median([abs(estimate(r.levels).capacity / truth - 1) for r in searches[:20]])
    assert err_early <= err_full + 0.02


def test_an_overloaded_open_loop_is_called_saturated_long_before_its_end() -> None:
    measure = simulated_measure(MODEL, [parse_slo("ttft:mean=100000")], N, 0.05, seed=1)  # no SLO can stop it
    over = measure(2 * MODEL.saturation_rate, [])
    assert over.stopped is not None and over.stopped.startswith("saturated") and over.sent < N / 2
    for rate in (0.5 * MODEL.saturation_rate, 0.9 * MODEL.saturation_rate):   # a stable queue runs to its end
        assert measure(rate, []).stopped is None


def test_bursty_arrivals_a_stable_queue_absorbs_are_not_called_saturated() -> None:
    """Gamma gaps of shape 0.5 (the chat-bursty preset) at 90 % of what the slots serve: bursts
    pile requests up for a while, the queue drains again; only a rate past saturation is called."""
    slos = [parse_slo("ttft:mean=100000")]
    calls = [simulated_measure(MODEL, slos, 200, 0.05, seed=s, burstiness=0.5)(0.9 * MODEL.saturation_rate, []).stopped
             for s in range(200)]
    assert sum(c is not None for c in calls) <= 2, [c for c in calls if c]
    over = simulated_measure(MODEL, slos, N, 0.05, seed=1, burstiness=0.5)(2 * MODEL.saturation_rate, [])
    assert over.stopped is not None and over.stopped.startswith("saturated") and over.sent < 0.8 * N


def test_a_closed_loop_is_never_called_saturated() -> None:
    monitor = LevelMonitor([parse_slo("ttft:mean=1e9")], 1000, 0.05, offered_rate=None)
    # in-system count climbing, completions slow: would be a runaway queue in an open loop
    assert all(monitor.observe(t * 0.1, {"ttft": 1.0}, started=2 * t) is None for t in range(1, 500))


def _stub(ttft_ms_at: Callable[[float], float]) -> Measure:
    """measure(level) whose every request has TTFT ttft_ms_at(level), plus a little noise."""
    rng = np.random.default_rng(0)

    def measure(level: float, prior: list[LevelSample]) -> LevelSample:
        values = ttft_ms_at(level) + rng.uniform(0, 1, 600)
        return LevelSample(level, {"ttft": [values]}, 600, 600)
    return measure


def test_a_concurrency_search_ends_at_adjacent_whole_levels() -> None:
    slos = [Slo("ttft", "p90", 100.0)]
    settings = SearchSettings(start=1, min_level=1, max_level=1024, integer=True)
    result = search(_stub(lambda c: 9.5 * c), slos, settings)   # 10 users: 95 ms; 11: 104.5 ms
    assert all(r.level == int(r.level) for r in result.levels)
    est = estimate(result.levels, integer=True)
    assert (est.capacity, est.low, est.high) == (10, 10, 11)


def test_a_capacity_beyond_the_range_is_an_open_interval() -> None:
    slos = [Slo("ttft", "p90", 100.0)]
    result = search(_stub(lambda r: 10.0), slos, SearchSettings(start=1, min_level=1, max_level=64))
    est = estimate(result.levels)
    assert [r.level for r in result.levels] == [1, 2, 4, 8, 16, 32, 64]
    assert est.low == 64 and est.high == math.inf and not est.bounded
    below = search(_stub(lambda r: 500.0), slos, SearchSettings(start=4, min_level=1, max_level=64))
    # down in steps of sqrt(2) (a level far under the capacity takes long to send) to the floor
    assert [r.level for r in below.levels] == pytest.approx([4, 4 / 2 ** 0.5, 2, 2 / 2 ** 0.5, 1])
    assert {r.verdict for r in below.levels} == {Verdict.violates} and estimate(below.levels).capacity == 0


def test_an_undecided_level_is_measured_again_up_to_the_cap() -> None:
    slos = [Slo("ttft", "p99", 100.0)]

    def small(level: float, prior: list[LevelSample]) -> LevelSample:   # 40 requests: a p99 is never decided on them
        return LevelSample(level, {"ttft": [np.full(40, 50.0)]}, 40, 40)

    result = search(small, slos, SearchSettings(start=1, min_level=1, max_level=2, max_runs_per_level=3))
    assert [len(r.samples) for r in result.levels] == [3, 3]
    assert all(r.verdict is Verdict.undecided for r in result.levels)


def test_a_bracket_without_a_decided_violation_is_closed_one_step_beyond() -> None:
    slos = [Slo("ttft", "p90", 100.0)]

    def measure(level: float, prior: list[LevelSample]) -> LevelSample:
        if level < 16:
            values = np.full(600, 50.0)
        elif level == 16:   # p90 over the limit by its point, its interval straddling it: undecided
            values = np.concatenate([np.full(528, 95.0), np.full(72, 105.0)])
        else:
            values = np.full(600, 500.0)
        return LevelSample(level, {"ttft": [values]}, 600, 600)

    fixed = SearchSettings(start=1, min_level=1, max_level=1024, rel_tol=1.0, looks_per_run=1)
    result = search(measure, slos, fixed)
    assert [r.verdict for r in result.levels if r.level == 16] == [Verdict.undecided]
    est = estimate(result.levels)
    assert (est.low, est.high) == (8, 32) and result.levels[-1].level == 32
    # with interim looks the step beyond is sqrt(2): a level a little over is decided already
    result = search(measure, slos, replace(fixed, looks_per_run=5))
    assert estimate(result.levels).high == result.levels[-1].level == pytest.approx(16 * math.sqrt(2))


def test_the_search_does_not_walk_down_for_a_met_level_when_the_fit_bounds_the_low_end() -> None:
    """Levels of 2000 requests whose share over a p99's limit crosses 1 % at 50 req/s: the
    bracket ends at levels the statistics leave undecided (49 and 51.2) or violated, and the fit
    across them bounds the capacity from below; no level under the bracket is measured (before,
    the search stepped down to 34.6 req/s for a met one)."""
    p99 = [Slo("ttft", "p99", 100.0)]

    def measure(level: float, prior: list[LevelSample]) -> LevelSample:
        share = 1 / (1 + math.exp(-(math.log(0.01 / 0.99) + 12 * math.log(level / 50.0))))
        values = np.full(2000, 50.0)
        values[np.linspace(0, 1999, round(2000 * share)).round().astype(int)] = 150.0
        return LevelSample(level, {"ttft": [values]}, 2000, 2000)

    result = search(measure, p99, SearchSettings(start=49.0, min_level=1.0, max_level=500.0))
    est = estimate(result.levels)
    assert min(r.level for r in result.levels) == 49.0
    assert not any(r.verdict is Verdict.meets for r in result.levels)
    assert est.low_by == "fit" and 0 < est.low < 50.0 < est.high
