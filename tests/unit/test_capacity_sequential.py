"""Sequential levels (capacity/sequential.py): the alpha spent over a level's looks, a level that
ends as soon as its verdict is decided (met as well as violated) on the simulated queue, the
requests in flight counted against a "met" call, ITL judged at the looks, the second runs a
search spends, and the saturation probe's start."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune.capacity.levels import LevelSample, judge_level
from servetune.capacity.monitor import LevelMonitor
from servetune.capacity.probe import SaturationProbe, completion_rate
from servetune.capacity.search import NEAR_LIMIT, SearchSettings, search
from servetune.capacity.sequential import InterimLooks, Looks, worth_another_run
from servetune.capacity.slo import Verdict, judge, parse_slo
from tests.fakes.queue_model import QueueModel, simulated_measure

MODEL = QueueModel(slots=16, prefill_ms=20.0, itl_ms=10.0, output_len=8)   # saturates at 178 req/s
P90 = [parse_slo("ttft:p90=100")]


@pytest.mark.parametrize("looks_per_run, max_runs", [(5, 3), (4, 1), (10, 2)])
def test_the_looks_spend_exactly_alpha(looks_per_run: int, max_runs: int) -> None:
    looks = Looks(0.05, looks_per_run, max_runs)
    spent = looks.planned_alpha + looks.interim_alpha * (looks_per_run * max_runs - 1)
    assert math.isclose(spent, 0.05) and looks.planned_alpha > looks.interim_alpha


def test_without_interim_looks_every_run_end_is_judged_at_alpha() -> None:
    looks = Looks(0.05, 1, 3)
    assert not looks.sequential and looks.look_points(500) == []
    assert looks.alpha_for(1, False) == looks.alpha_for(3, False) == 0.05


def test_a_level_far_under_capacity_ends_met_at_an_interim_look() -> None:
    looks = Looks(0.05, 5, 3)
    sample = simulated_measure(MODEL, P90, 1000, 0.05, seed=3, looks=looks)(0.3 * MODEL.saturation_rate, [])
    assert sample.stopped_verdict is Verdict.meets and sample.stopped.startswith("met at look")
    assert sample.sent < 1000
    assert judge_level(sample.level, [sample], P90, looks).verdict is Verdict.meets


def test_a_level_over_capacity_ends_violated_at_an_interim_look() -> None:
    looks = Looks(0.05, 5, 3)
    sample = simulated_measure(MODEL, P90, 1000, 0.05, seed=3, looks=looks)(0.97 * MODEL.saturation_rate, [])
    assert sample.early_verdict is Verdict.violates and sample.sent < 1000
    assert judge_level(sample.level, [sample], P90, looks).verdict is Verdict.violates


def test_a_fixed_length_level_runs_to_its_end() -> None:
    sample = simulated_measure(MODEL, P90, 1000, 0.05, seed=3, looks=Looks(0.05, 1, 3))(0.3 * MODEL.saturation_rate, [])
    assert sample.stopped is None and sample.sent == 1000


def test_requests_in_flight_are_counted_over_the_limit_before_a_met_call() -> None:
    """400 finished requests far under a p90 limit: met with nothing in flight; with 100 still
    in flight (as many as could all be slow) the look waits."""
    looks = Looks(0.05, 5, 1)

    def look(in_flight: int) -> tuple[Verdict, str] | None:
        interim = InterimLooks(P90, looks, 500, {})
        calls = [interim.observe(i, {"ttft": 10.0}, in_flight) for i in range(400)]
        return calls[-1]

    assert look(0) is not None and look(0)[0] is Verdict.meets   # type: ignore[index]
    assert look(100) is None


def test_an_interim_look_pools_the_levels_earlier_runs() -> None:
    looks = Looks(0.05, 5, 3)
    p99 = [parse_slo("ttft:p99=100")]
    interim = InterimLooks(p99, looks, 500, {"ttft": [np.full(800, 10.0)]})
    # 100 values alone cannot show a p99 met at the interim alpha; with 800 before them they can
    assert judge(p99[0], [np.full(100, 10.0)], looks.interim_alpha).verdict is Verdict.undecided
    calls = [interim.observe(i, {"ttft": 10.0}, 0) for i in range(100)]
    assert calls[-1] is not None and calls[-1][0] is Verdict.meets


def test_a_level_whose_estimate_sits_on_its_limit_is_not_measured_again() -> None:
    looks = Looks(0.05, 5, 3)
    rng = np.random.default_rng(0)
    on_limit = [LevelSample(1.0, {"ttft": [rng.uniform(0, 100 / 0.9, 500)]}, 500, 500) for _ in range(2)]
    assert judge_level(1.0, on_limit, P90, looks).verdict is Verdict.undecided
    assert not worth_another_run(judge_level(1.0, on_limit, P90, looks).judgements, looks, 2)
    assert not worth_another_run(judge_level(1.0, on_limit[:1], P90, looks).judgements, looks, 1)
    # a p99 of 1 or 2 x 150 values far under its limit has no upper bound yet: another run can give one
    p99 = [parse_slo("ttft:p99=100")]
    few = [LevelSample(1.0, {"ttft": [np.full(150, 10.0)]}, 150, 150) for _ in range(2)]
    for runs in (1, 2):
        judged_few = judge_level(1.0, few[:runs], p99, looks)
        assert judged_few.verdict is Verdict.undecided and worth_another_run(judged_few.judgements, looks, runs)


def test_the_probe_measures_the_saturation_rate_and_starts_at_seven_tenths_of_it() -> None:
    ends, sent = MODEL.closed_loop_ends(128, 5.0, np.random.default_rng(1))
    rate = completion_rate(list(ends))
    assert abs(rate / MODEL.saturation_rate - 1) < 0.05 and sent > len(ends)
    probe = SaturationProbe(rate=rate, min_latency_s=0.09, users=128, requests=sent, seconds=float(ends.max()))
    assert probe.start("rate") == pytest.approx(0.7 * rate)
    assert probe.start("concurrency") == round(0.7 * rate * 0.09)   # Little's law over the fastest request


@pytest.mark.slow
def test_sequential_searches_spend_fewer_requests_for_the_same_answer() -> None:
    """The same simulated searches with and without interim looks: fewer requests, each
    interval still covering the crossing as often (p90 TTFT, 400 requests a run)."""
    truth = MODEL.true_crossing(0.9, 100.0, 400, runs=100)
    totals, covered = {}, {}
    for looks_per_run in (1, 5):
        st = SearchSettings(start=20.0, min_level=0.5, max_level=500.0, looks_per_run=looks_per_run)
        runs = [search(simulated_measure(MODEL, P90, 400, st.alpha, seed, looks=st.looks), P90, st) for seed in range(20)]
        totals[looks_per_run] = sum(r.requests for r in runs)
        covered[looks_per_run] = 0
        for r in runs:
            met = [lv.level for lv in r.levels if lv.verdict is Verdict.meets]
            violated = [lv.level for lv in r.levels if lv.verdict is Verdict.violates]
            covered[looks_per_run] += max(met, default=0) <= truth <= min(violated, default=math.inf)
    assert totals[5] < 0.8 * totals[1], totals
    assert covered[5] >= 18, covered



def test_an_itl_slo_is_judged_at_interim_looks() -> None:
    """ITL gaps are fed to the looks: far under the limit a level ends met at a look, far over it
    violated (before, an ITL SLO was never called met at a look, so its levels ran to their end)."""
    looks = Looks(0.05, 5, 1)
    itl = [parse_slo("itl:p99=50")]

    def first_call(gap_ms: float, in_flight: int = 0) -> tuple[Verdict, str] | None:
        interim = InterimLooks(itl, looks, 500, {})
        for i in range(400):
            call = interim.observe(i, {"ttft": 10.0}, in_flight, gaps_ms=np.full(31, gap_ms))
            if call is not None:
                return call
        return None

    met, violated = first_call(5.0), first_call(80.0)
    assert met is not None and met[0] is Verdict.meets
    assert violated is not None and violated[0] is Verdict.violates
    # requests in flight count with a request's worth of gaps over the limit each
    assert first_call(5.0, in_flight=100) is None


def test_a_run_is_not_stopped_at_its_last_request() -> None:
    """A loss counted at the run's last request saves nothing: the run ends there anyway and is
    judged on its values at the planned look."""
    p99 = [parse_slo("ttft:p99=100")]
    monitor = LevelMonitor(p99, 100, 0.05)
    calls = [monitor.observe(i * 0.01, {"ttft": 500.0 if i >= 80 else 10.0}, started=100) for i in range(100)]
    assert all(c is None for c in calls) and monitor.verdict is None


def test_only_a_bracket_level_near_its_limit_gets_a_second_run() -> None:
    p90 = [parse_slo("ttft:p90=100")]

    def measure(level: float, prior: list[LevelSample]) -> LevelSample:
        # 40 requests: the p90 is 45 x level, its 95 % interval [45, 300] x level (undecided under
        # a level of 100 / 45) and its likely range (the 50 % interval) 45 x level alone
        return LevelSample(level, {"ttft": [np.concatenate([np.full(39, 45.0 * level), np.full(1, 300.0 * level)])]},
                           40, 40)

    st = SearchSettings(start=1.0, min_level=0.1, max_level=100.0, max_levels=4, max_runs_per_level=2)
    runs = {r.level: (len(r.samples), r.verdict, r.judgements[0].estimate) for r in search(measure, p90, st).levels}
    assert runs[1.0] == (1, Verdict.undecided, 45.0)    # surely far under the limit: one run is all it gets
    assert runs[2.0] == (2, Verdict.undecided, 90.0)    # likely within NEAR_LIMIT of it: a second run
    assert 100 / NEAR_LIMIT < 90 and runs[4.0][1] is Verdict.violates



def test_failed_requests_count_over_every_limit_at_a_level_and_its_looks() -> None:
    """A level whose answered requests are all fast but some of whose requests failed (the server
    answered with an error, or the stream broke: an infinite value in its place) is not met on
    the answered ones alone: those users got nothing."""
    looks = Looks(0.05, 1, 3)
    fast, failed = np.array([10.0]), np.array([np.inf])
    answered = LevelSample(1.0, {"ttft": [fast] * 460}, 460, 460)
    assert judge_level(1.0, [answered], P90, looks).verdict is Verdict.meets
    every_sixth = [failed if i % 6 == 0 else fast for i in range(540)]   # 90 of 540 (17 %)
    judged = judge_level(1.0, [LevelSample(1.0, {"ttft": every_sixth}, 540, 450, failed=90)], P90, looks)
    assert judged.verdict is Verdict.violates and judged.judgements[0].n == 540
    assert math.isfinite(judged.judgements[0].estimate) and judged.judgements[0].estimate > 100.0
    # the monitor counts a failed request over every limit: a sure loss ends the level early
    monitor = LevelMonitor(P90, 500, 0.05)
    calls = [monitor.observe(i * 0.01, {"ttft": math.inf if i % 3 == 0 else 10.0}, started=500) for i in range(400)]
    assert any(calls) and monitor.verdict is Verdict.violates and "lost p90_ttft_ms" in (monitor.reason or "")
    # and an interim look does not call a level met while failed requests say otherwise
    clean = InterimLooks(P90, Looks(0.05, 5, 3), 500, {})
    assert any(c is not None and c[0] is Verdict.meets for c in (clean.observe(i, {"ttft": 10.0}, 0) for i in range(400)))
    failing = InterimLooks(P90, Looks(0.05, 5, 3), 500, {})
    calls_failing = [failing.observe(i, {"ttft": math.inf if i % 6 == 0 else 10.0}, 0) for i in range(400)]
    assert not any(c is not None and c[0] is Verdict.meets for c in calls_failing)
