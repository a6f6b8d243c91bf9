"""`servetune size` on capacities of known truth: a capacity search of the simulated queue
(tests/fakes/queue_model.py) written as `servetune capacity` writes it; the replicas for a
multiple of that capacity, their interval against the truth, the balancers, a trace's busy minute."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servetune.capacity.document import capacity_document
from servetune.capacity.estimate import estimate
from servetune.capacity.search import SearchSettings, search
from servetune.capacity.slo import parse_slo
from servetune.load.scenario import Scenario
from servetune.load.trace.spec import TraceSpec
from servetune.load.trace.window import Replay, ReplayRequest
from servetune.sizing.balance import assign, shares
from servetune.sizing.capacities import window_rate
from servetune.sizing.plan import replicas_for
from servetune.sizing.target import trace_target
from tests.fakes.queue_model import QueueModel, simulated_measure
from tests.unit.cli_run import servetune

MODEL = QueueModel(slots=16, prefill_ms=20.0, itl_ms=10.0, output_len=8)
SLOS = [parse_slo("ttft:p90=60")]
N = 400
SETTINGS = SearchSettings(start=20.0, min_level=0.5, max_level=500.0)


@pytest.fixture(scope="module")
def truth() -> float:
    """The rate at which p90 TTFT over runs of N requests crosses 60 ms (a long simulation)."""
    return MODEL.true_crossing(0.9, 60.0, N, runs=100)


@pytest.fixture(scope="module")
def capacity_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float, float, float]:
    """A simulated search written as `servetune capacity --out` writes it; (file, point, low, high)."""
    result = search(simulated_measure(MODEL, SLOS, N, SETTINGS.alpha, seed=7, looks=SETTINGS.looks), SLOS, SETTINGS)
    est = estimate(result.levels, alpha=SETTINGS.alpha)
    scenario = Scenario(name="chat", input_len=16, output_len=MODEL.output_len, rate=1.0, num_prompts=N)
    doc = capacity_document(result, est, SLOS, SETTINGS, "rate",
                            {"url": "http://127.0.0.1:9", "scenario": json.loads(scenario.model_dump_json()),
                             "num_prompts": N})
    path = tmp_path_factory.mktemp("cap") / "cap.json"
    path.write_text(json.dumps(doc))
    assert est.bounded
    return path, est.capacity, est.low, est.high


def _size(path: Path, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "size.json"
    res = servetune("size", path, *args, "--price-per-gpu-hour", "2.5", "--gpus-per-replica", "2", "--out", out)
    assert res.code == 0, res.stderr
    doc: dict = json.loads(out.read_text())
    return doc


def test_three_times_the_capacity_takes_three_replicas_and_the_interval_holds_the_truth(
        capacity_file: tuple[Path, float, float, float], truth: float, tmp_path: Path) -> None:
    path, point, low, high = capacity_file
    target = 3 * point
    (sized,) = _size(path, tmp_path, "--rate", repr(target))["configs"]
    replicas = sized["replicas"]
    assert replicas["value"] == 3
    needed = math.ceil(target / truth)   # what the queue truly needs for this load
    assert replicas["low"] <= needed <= replicas["high"], (replicas, needed, truth, (low, point, high))
    assert replicas["low"] == math.ceil(target / high) and replicas["high"] == math.ceil(target / low)
    assert sized["gpus"] == 6 and sized["usd_per_hour"] == pytest.approx(15.0)
    assert sized["joules_per_output_token"] is None and "not measured" in sized["energy"]


def test_three_and_a_half_times_the_capacity_takes_four(capacity_file: tuple[Path, float, float, float],
                                                       tmp_path: Path) -> None:
    path, point, _, _ = capacity_file
    doc = _size(path, tmp_path, "--rate", repr(3.5 * point))
    assert doc["configs"][0]["replicas"]["value"] == 4
    # a growth factor multiplies the target
    grown = _size(path, tmp_path / "g", "--rate", repr(point), "--growth", "3.5")
    assert grown["configs"][0]["replicas"]["value"] == 4 and grown["target"]["growth"] == 3.5


def test_replicas_round_up_but_not_past_a_whole_multiple() -> None:
    capacity = 0.1 + 0.2   # 0.30000000000000004: 3 x it / it is not exactly 3 in floating point
    assert replicas_for(3 * capacity, capacity) == 3
    assert replicas_for(3.01 * capacity, capacity) == 4
    assert replicas_for(0.2, capacity) == 1
    assert replicas_for(1.0, 0.0) == math.inf and replicas_for(5.0, math.inf) == 1


def _replay(hashes: list[int | None], follows: list[int | None] | None = None) -> Replay:
    follows = follows or [None] * len(hashes)
    return Replay(tuple(ReplayRequest(float(i), 10, 5, None if h is None else (h, 100 + i), f)
                        for i, (h, f) in enumerate(zip(hashes, follows))), len(hashes), float(len(hashes)))


def test_round_robin_deals_requests_in_turn_and_session_keeps_a_prefix_on_one_replica() -> None:
    replay = _replay([1, 2, 1, 2, 1, 3, 1])
    assert assign(replay, 2, "round-robin") == [0, 1, 0, 1, 0, 1, 0]
    # prefix 1 on replica 0, prefix 2 on replica 1; prefix 3 (new) to the one given fewer so far
    assert assign(replay, 2, "session") == [0, 1, 0, 1, 0, 1, 0]
    parts = shares(_replay([1, 1, 1, 2]), 2, "session")
    assert [len(p.requests) for p in parts] == [3, 1]
    assert {r.hash_ids[0] for r in parts[1].requests if r.hash_ids} == {2}


def test_the_session_balancer_follows_the_longest_shared_prefix_not_a_common_system_prompt() -> None:
    """Every prompt opens with block 7 (a system prompt); two documents (blocks 10, 20) are each
    asked about three times: each document's questions stay together, the load stays even."""
    blocks = [(7, 10, 100), (7, 20, 200), (7, 10, 101), (7, 20, 201), (7, 10, 102), (7, 20, 202)]
    replay = Replay(tuple(ReplayRequest(float(i), 10, 5, b) for i, b in enumerate(blocks)), 6, 6.0)
    owner = assign(replay, 2, "session")
    assert owner == [0, 1, 0, 1, 0, 1]
    assert len({owner[i] for i in (0, 2, 4)}) == 1 and len({owner[i] for i in (1, 3, 5)}) == 1


def test_a_conversation_stays_whole_under_session_and_is_cut_loose_under_round_robin() -> None:
    replay = _replay([None, None, None, None], follows=[None, None, 0, 2])   # turns 0 -> 2 -> 3
    by_session = shares(replay, 2, "session")
    assert [len(p.requests) for p in by_session] == [3, 1]
    assert [r.follows for r in by_session[0].requests] == [None, 0, 1]   # positions within the share
    by_turn = shares(replay, 2, "round-robin")
    assert [r.follows for r in by_turn[0].requests] == [None, 0]   # requests 0 and 2: 2 follows 0
    assert [r.follows for r in by_turn[1].requests] == [None, None]   # 3 follows 2, on the other replica


def test_a_trace_target_is_the_minute_at_the_percentile_of_per_minute_counts(tmp_path: Path) -> None:
    counts = [30, 120, 60, 90, 10]   # requests in each minute; a last partial minute is left out
    rows = []
    for minute, n in enumerate(counts):
        rows += [{"timestamp": (minute * 60 + 60 * i / n) * 1000, "input_length": 10, "output_length": 5}
                 for i in range(n)]
    rows.append({"timestamp": 5 * 60_000 + 30_000, "input_length": 10, "output_length": 5})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = TraceSpec(path=path)
    peak = trace_target(spec, 100, 1.0)
    assert peak.rps == pytest.approx(2.0) and peak.window is not None and peak.window.start_s == 60
    median = trace_target(spec, 50, 2.0)
    assert median.rps == pytest.approx(2 * 60 / 60) and median.window is not None and median.window.start_s == 120


@pytest.mark.parametrize("args, says", [
    (["--rate", "0"], "--rate 0: must be a finite number above 0"),
    (["--rate", "5", "--trace", "x.jsonl"], "give --rate or --trace as the target, not both"),
    (["--rate", "5", "--percentile", "0"], "--percentile 0: must be a finite number above 0"),
    (["--rate", "5", "--balance", "random"], "--balance 'random': expected round-robin or session"),
    (["--rate", "5", "--check"], "--check needs --url"),
    (["--rate", "5", "--url", "http://127.0.0.1:9"], "--url is the server of --check"),
    (["--rate", "5", "--scenario", "chat"], "--scenario names a study's scenario"),
    (["--rate", "5", "--replicas", "2"], "--replicas chooses what --check measures"),
    ([], "give a target: --rate REQ_PER_S or --trace FILE"),
])
def test_bad_input_is_one_line_and_exit_2(capacity_file: tuple[Path, float, float, float], args: list[str],
                                          says: str) -> None:
    res = servetune("size", capacity_file[0], *args)
    assert res.code == 2 and len(res.error_lines) == 1 and says in res.error_lines[0], res.stderr


def test_a_file_that_is_no_capacity_result_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps({"completed": 10}))
    res = servetune("size", bad, "--rate", "5")
    assert res.code == 2 and "not a capacity result" in res.stderr and str(bad) in res.stderr


def _study(tmp_path: Path) -> Path:
    """A `maximize: capacity` study's store with two configs measured on one boot each: the
    baseline (10 req/s [8, 12]) and tensor parallel 2 (30 req/s [27, 33], two GPUs a server)."""
    import sys

    from servetune.analysis import capacity_runs
    from servetune.engine.config import Config
    from servetune.load.records import RunResult
    from servetune.store import StudyStore, TrialRole
    from servetune.study.spec import StudySpec
    from servetune.vocabulary import Outcome

    spec = StudySpec.model_validate({
        "name": "sized", "engine": {"command": [sys.executable, "-c", "pass"], "model": str(tmp_path / "m")},
        "space": {"tensor-parallel-size": [2]},
        "scenarios": [{"name": "chat", "input_len": 8, "output_len": 4, "rate": 10, "concurrency": None}],
        "objective": {"maximize": "capacity", "slo": {"p90_ttft_ms": 500}},
        "strategy": "grid", "replicates": 1, "price_per_gpu_hour": 3.0,
    })
    store = StudyStore.in_dir(tmp_path / "study")
    store.set_meta_json("spec", spec.model_dump(mode="json"))
    for role, config, (cap, low, high) in (
            (TrialRole.baseline, spec.baseline_config(), (10.0, 8.0, 12.0)),
            (TrialRole.candidate, spec.baseline_config().merged(Config.of({"tensor-parallel-size": 2})), (30.0, 27.0, 33.0))):
        trial = store.begin_trial(role, config, {})
        store.record_boot(trial.id, healthy_at=trial.started_at + 1, boot_facts=None, mismatches=[], log_path=None)
        store.record_run(trial.id, capacity_runs.CAPACITY_REPLICATE, RunResult(scenario="chat", summary={
            "capacity": cap, "capacity_low": low, "capacity_high": high, "load": "rate",
            "output_throughput_at_capacity": cap * 4, "judgement": capacity_runs.JUDGEMENT}),
            started_at=0, ended_at=1)
        store.finish_trial(trial.id, Outcome.ok)
    store.close()
    return tmp_path / "study"


def test_a_capacity_study_sizes_every_config_with_its_gpus_and_the_studys_price(tmp_path: Path) -> None:
    study = _study(tmp_path)
    out = tmp_path / "size.json"
    res = servetune("size", study, "--rate", "60", "--out", out)
    assert res.code == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["price_per_gpu_hour"] == 3.0
    by_gpus = {c["gpus_per_replica"]: c for c in doc["configs"]}
    base, tp2 = by_gpus[1], by_gpus[2]
    assert base["replicas"] == {"value": 6, "low": 5, "high": 8}          # 60 / 10, 60 / 12, 60 / 8
    assert tp2["replicas"] == {"value": 2, "low": 2, "high": 3} and tp2["gpus"] == 4
    assert doc["configs"][0] is not None and doc["configs"][0]["gpus"] == 4   # the fewest GPUs first
    # 4 output tokens a request: 240 tokens/s; 4 GPUs at 3 $ an hour
    assert tp2["usd_per_hour"] == pytest.approx(12.0)
    assert tp2["usd_per_million_output_tokens"] == pytest.approx(12.0 / (240 * 3600) * 1e6)
    assert "tensor-parallel-size=2" in tp2["config"]


def test_a_scenario_the_study_does_not_score_is_named(tmp_path: Path) -> None:
    study = _study(tmp_path)
    res = servetune("size", study, "--rate", "60", "--scenario", "nope")
    assert res.code == 2 and "--scenario 'nope'" in res.stderr and "chat" in res.stderr


def test_a_trace_capacity_is_sized_for_its_own_traces_busy_minute_in_requests_per_second(tmp_path: Path) -> None:
    """A speed-up measured on the trace's first minute (60 requests: 1 req/s recorded), 2x
    [1.5, 2.5]: 2 req/s. The trace's busiest minute holds 120 (2 req/s); grown 3x, 6 req/s."""
    counts = [60, 120, 60]
    rows = [{"timestamp": (minute * 60 + 60 * i / n) * 1000, "input_length": 10, "output_length": 5}
            for minute, n in enumerate(counts) for i in range(n)]
    rows.append({"timestamp": 180_000, "input_length": 10, "output_length": 5})
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scenario = Scenario(name="t", trace=TraceSpec(path=trace, duration_s=60.0))
    doc = {"status": "complete", "load": "speedup", "slos": ["ttft:p90<=500ms"], "alpha": 0.05, "looks_per_run": 5,
           "capacity": {"value": 2.0, "low": 1.5, "high": 2.5, "binding": "ttft:p90<=500ms"},
           "scenario": json.loads(scenario.model_dump_json()), "num_prompts": 60, "levels": []}
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(doc))
    out = _size(path, tmp_path, "--growth", "3")
    (sized,) = out["configs"]
    assert sized["capacity"]["req_per_s"] == pytest.approx(2.0) and sized["capacity"]["req_per_s_low"] == 1.5
    assert out["target"]["req_per_s"] == pytest.approx(6.0) and out["target"]["window_start_s"] == 60
    assert sized["replicas"] == {"value": 3, "low": 3, "high": 4}


def test_a_window_cut_to_its_first_requests_is_sized_at_the_rate_it_replays(tmp_path: Path) -> None:
    """A minute recorded at 1 req/s cut to its first 30 requests (`max_requests`) replays 30 s of
    that traffic: a speed-up of it stands for 1 req/s per unit, not 30 requests over the whole
    minute's 60 s (0.5 req/s, which would double the replicas)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 1000, "input_length": 10, "output_length": 5}) + "\n"
                             for i in range(120)))
    for spec in (TraceSpec(path=trace, duration_s=60.0, max_requests=30), TraceSpec(path=trace, max_requests=30)):
        assert window_rate(Scenario(name="t", trace=spec), "t") == pytest.approx(1.0)
    assert window_rate(Scenario(name="t", trace=TraceSpec(path=trace, duration_s=60.0)), "t") == pytest.approx(1.0)


def test_a_closed_loops_capacity_has_no_rate_to_size_by(tmp_path: Path) -> None:
    scenario = Scenario(name="users", input_len=8, output_len=4, concurrency=8)
    path = tmp_path / "cap.json"
    path.write_text(json.dumps({"status": "complete", "load": "concurrency", "slos": ["ttft:p90<=500ms"],
                                "capacity": {"value": 16, "low": 12, "high": 20},
                                "scenario": json.loads(scenario.model_dump_json())}))
    res = servetune("size", path, "--rate", "5")
    assert res.code == 2 and "--load concurrency (concurrent users) has no request rate" in res.stderr


@given(low=st.floats(0.01, 1e4), spread=st.floats(1.0, 10.0), where=st.floats(0.0, 1.0), target=st.floats(0.01, 1e6))
def test_the_replica_interval_holds_the_true_count_whenever_the_capacity_interval_holds_the_capacity(
        low: float, spread: float, where: float, target: float) -> None:
    high = low * spread
    truth = low + where * (high - low)
    assert replicas_for(target, high) <= replicas_for(target, truth) <= replicas_for(target, low)
