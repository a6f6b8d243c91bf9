"""An SLO is met, unproven or violated by where its interval lies, pooled over a config's boots
(analysis/slo_proof.py); a winner meets every SLO, the search leaves out only violated configs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from servetune.analysis import analysis, revalidation, slo_proof
from servetune.analysis.types import Estimate, SloState
from servetune.load.records import RequestRecord, RunResult
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.vocabulary import Outcome

MS = 1_000_000


def _records(path: Path, ttfts_ms: list[float]) -> Path:
    """A run's JSONL: one request per TTFT, each with four tokens 10 ms apart after the first."""
    lines = []
    for i, ttft in enumerate(ttfts_ms):
        start = i * 1000 * MS
        first = start + int(ttft * MS)
        chunks = [first + k * 10 * MS for k in range(4)]
        lines.append(RequestRecord(index=i, input_len=8, output_len=4, scheduled_ns=start, dispatch_ns=start,
                                   first_token_ns=first, chunk_ns=chunks, chunk_tokens=[1] * 4, end_ns=chunks[-1],
                                   output_tokens=4).model_dump_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def _runs(tmp_path: Path, name: str, runs: int, ttft: object) -> list[Path]:
    """`runs` runs of 100 requests whose TTFTs `ttft(run)` gives."""
    return [_records(tmp_path / f"{name}{r}.jsonl", ttft(r)) for r in range(runs)]  # type: ignore[operator]


def _steady(rng: np.random.Generator, mean_ms: float, n: int = 100) -> list[float]:
    return [float(x) for x in mean_ms * (1 + 0.1 * rng.standard_normal(n))]


def test_a_percentile_well_inside_the_limit_is_met(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    files = _runs(tmp_path, "met", 6, lambda r: _steady(rng, 100.0))
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.met and check.basis == "requests" and check.n == 600
    assert check.high <= 500.0 and 100.0 < check.estimate < 200.0


def test_a_percentile_wholly_over_the_limit_is_violated(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    files = _runs(tmp_path, "slow", 6, lambda r: _steady(rng, 1000.0))
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.violated and check.low > 500.0


def test_a_p99_at_the_limit_is_unproven_though_its_point_estimate_is_under_it(tmp_path: Path) -> None:
    # One request in 100 of every run at 800 ms against 500: the runs' p99 values read ~107 ms,
    # the pooled p99 too, but its interval reaches the slow requests.
    rng = np.random.default_rng(3)
    files = _runs(tmp_path, "edge", 6, lambda r: [*_steady(rng, 100.0, 99), 800.0])
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.estimate < 500.0 < check.high and check.low < 500.0
    assert check.state is SloState.unproven


def test_too_few_requests_cannot_prove_a_p99(tmp_path: Path) -> None:
    files = [_records(tmp_path / "few.jsonl", [100.0] * 40)]
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.unproven and check.high == math.inf


def test_a_median_is_judged_per_request_and_itl_too(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    files = _runs(tmp_path, "m", 3, lambda r: _steady(rng, 100.0))
    median, itl = slo_proof.check_scenario("a", {"median_ttft_ms": 150.0, "p90_itl_ms": 5.0}, files, {}, alpha=0.05)
    assert median.basis == "requests" and median.state is SloState.met
    assert itl.basis == "requests" and itl.state is SloState.violated   # every gap is 10 ms


@pytest.mark.parametrize(("key", "limit", "state"), [
    ("output_throughput", 80.0, SloState.met),          # a floor under the whole interval [90, 110]
    ("output_throughput", 120.0, SloState.violated),    # over it
    ("output_throughput", 100.0, SloState.unproven),    # inside it
    ("mean_ttft_ms", 120.0, SloState.met),              # a ceiling over the whole interval
    ("mean_ttft_ms", 80.0, SloState.violated),
    ("mean_ttft_ms", 95.0, SloState.unproven),
])
def test_per_run_metrics_are_judged_by_their_interval(key: str, limit: float, state: SloState) -> None:
    metrics = {k: Estimate(100.0, 90.0, 110.0, 4) for k in ("output_throughput", "mean_ttft_ms")}
    check, = slo_proof.check_scenario("a", {key: limit}, None, metrics, alpha=0.05)
    assert check.basis == "runs" and check.state is state


def test_a_missing_value_or_interval_proves_nothing() -> None:
    no_interval = {"output_throughput": Estimate(100.0, math.nan, math.nan, 1)}
    assert slo_proof.check_scenario("a", {"output_throughput": 10.0}, None, no_interval, 0.05)[0].state \
        is SloState.unproven
    missing, = slo_proof.check_scenario("a", {"p99_tpot_ms": 10.0}, None, {}, 0.05)
    assert missing.state is SloState.unproven and missing.basis == ""


def test_without_records_a_percentile_falls_back_to_the_runs_interval() -> None:
    metrics = {"p99_ttft_ms": Estimate(100.0, 90.0, 110.0, 4)}
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, None, metrics, alpha=0.05)
    assert check.basis == "runs" and check.state is SloState.met


# --- in a study: the winner, the search, re-validation -------------------------------------

STUDY = """
name: unit
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8]}
scenarios:
  - {name: a, input_len: 8, output_len: 4, concurrency: 1, num_prompts: 100}
objective: {maximize: output_throughput, slo: {p99_ttft_ms: 500}}
strategy: ofat
replicates: 3
revalidation: {max_boots: 3}
"""


def _trial(store: StudyStore, spec, rng, role: str, params: dict[str, int], mean: float,
           ttfts: object) -> None:
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params)
    for rep in range(1, 4):
        records = _records(store.path.parent / f"t{trial.seq}r{rep}.jsonl", ttfts(rng))  # type: ignore[operator]
        summary = {"output_throughput": mean * (1 + 0.01 * rng.standard_normal()),
                   "p99_ttft_ms": float(np.percentile(ttfts(rng), 99))}  # type: ignore[operator]
        store.record_run(trial.id, rep, RunResult(scenario="a", summary=summary, records_path=records.name),
                         started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)


def _study(tmp_path: Path, candidate_ttfts: object):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(5)
    base = lambda r: _steady(r, 100.0)  # noqa: E731
    _trial(store, spec, rng, "baseline", {}, 100, base)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 130, candidate_ttfts)
    _trial(store, spec, rng, "baseline_final", {}, 100, base)
    _trial(store, spec, rng, "finalist", {"max-num-seqs": 8}, 130, candidate_ttfts)
    return spec, store


def test_a_better_finalist_whose_p99_sits_at_the_limit_is_not_the_winner(tmp_path: Path) -> None:
    spec, store = _study(tmp_path, lambda r: [*_steady(r, 100.0, 99), 800.0])
    result = analysis.analyze(store, spec)
    fast = next(c for c in result.configs if not c.is_baseline)
    assert fast.objective_effect is not None and fast.objective_effect.verdict == "better"
    assert fast.slo_state is SloState.unproven and fast.feasible
    assert result.baseline is not None and result.baseline.slo_state is SloState.met
    assert result.winner is None
    assert "does not meet every SLO at 95 % confidence" in result.winner_reason
    assert "p99_ttft_ms" in result.winner_reason and "unproven" in result.winner_reason
    # the search keeps it (more boots may prove it): feasible for TPE's constraint and OFAT
    assert all(v.feasible for v in analysis.history(store, spec))
    look = revalidation.next_look(result, spec, cap=3)
    assert look.key == fast.key and "SLO is unproven" in look.why   # booted again, up to the cap


def test_a_p99_that_the_cap_cannot_prove_stops_re_validation(tmp_path: Path) -> None:
    # 20 requests a run, 3 runs a boot: 3 boots measure 180, and a p99 needs 368 to be shown met
    spec, store = _study(tmp_path, lambda r: _steady(r, 100.0, 20))
    result = analysis.analyze(store, spec)
    fast = next(c for c in result.configs if not c.is_baseline)
    assert fast.objective_effect is not None and fast.objective_effect.verdict == "better"
    assert fast.slo_state is SloState.unproven and result.winner is None
    look = revalidation.next_look(result, spec, cap=3)
    assert look.key is None and "cannot be proven within the cap" in look.why and "368" in look.why


def test_the_same_finalist_well_inside_its_slo_wins(tmp_path: Path) -> None:
    spec, store = _study(tmp_path, lambda r: _steady(r, 100.0))
    result = analysis.analyze(store, spec)
    assert result.winner is not None and result.winner.slo_state is SloState.met
    assert "every SLO met at 95 % confidence" in result.winner_reason


def test_a_violated_slo_is_infeasible_for_the_search(tmp_path: Path) -> None:
    spec, store = _study(tmp_path, lambda r: _steady(r, 900.0))
    result = analysis.analyze(store, spec)
    fast = next(c for c in result.configs if not c.is_baseline)
    assert fast.slo_state is SloState.violated and not fast.feasible and result.winner is None
    assert [v.feasible for v in analysis.history(store, spec)] == [True, False]
    assert analysis.pick_finalists(store, spec, 1) == []



def _with_failures(path: Path, every: int, why: str) -> Path:
    """Every `every`-th request of the run's records made one that ended without an answer: `why`."""
    lines = path.read_text().splitlines()
    for i in range(0, len(lines), every):
        rec = RequestRecord.model_validate_json(lines[i])
        lines[i] = RequestRecord(index=rec.index, input_len=8, output_len=4, scheduled_ns=rec.scheduled_ns,
                                 dispatch_ns=rec.dispatch_ns, end_ns=rec.dispatch_ns + MS, error=why).model_dump_json()
    path.write_text("\n".join(lines) + "\n")
    return path


def test_requests_that_failed_count_over_the_limit_not_out_of_the_percentile(tmp_path: Path) -> None:
    """600 answered requests at 100 ms meet p99 <= 500 ms. When one in twenty of them failed
    instead (an error status: users who got no answer), the p99 is over the limit, though the
    answered ones are as fast. Requests cancelled because the run was stopped on purpose are
    no failure; the median is not moved over by 5 % failed."""
    rng = np.random.default_rng(5)
    files = _runs(tmp_path, "f", 6, lambda r: _steady(rng, 100.0))
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.met and check.n == 600
    for f in files[:3]:
        _with_failures(f, 20, "stopped_early: in flight when the run was stopped early (should_stop)")
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.met and check.n == 585
    for f in files:
        _with_failures(f, 20, "HTTP 500: Internal Server Error")
    check, = slo_proof.check_scenario("a", {"p99_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.violated and check.n == 600 and check.low > 500.0
    check, = slo_proof.check_scenario("a", {"p50_ttft_ms": 500.0}, files, {}, alpha=0.05)
    assert check.state is SloState.met
