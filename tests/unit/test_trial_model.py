"""The trial model: Trial records with their runs, enums that still compare as the strings they
replace, a run summary that keeps `vllm bench serve`'s field names, and a store that reads the
study once per write rather than once per trial."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from servetune.analysis import analysis
from servetune.load.records import RunResult, RunSummary
from servetune.store import StudyStore, TrialRole, TrialState
from servetune.study import parse_study
from servetune.vocabulary import Outcome
from tests.unit.test_tune_analysis import STUDY, _trial

BENCH_FIELDS = {"duration": 2.0, "completed": 8, "failed": 0, "request_throughput": 4.0,
                "output_throughput": 32.0, "p99_ttft_ms": 12.5, "p90_itl_ms": 3.0, "errors": []}


def test_roles_states_and_outcomes_are_enums_that_equal_their_strings(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.candidate, parse_study(STUDY).baseline_config(), {})
    assert trial.role is TrialRole.candidate and trial.state is TrialState.running and trial.outcome is None
    store.finish_trial(trial.id, Outcome.ok)
    (done,) = store.trials(TrialRole.candidate)
    assert done.outcome is Outcome.ok and done.state is TrialState.done and done.done
    assert done.role == "candidate" and done.status == "done" and done.outcome == "ok"
    assert store.trials(TrialRole.baseline) == []


def test_the_run_summary_keeps_the_bench_field_names_and_reads_like_a_dict(tmp_path: Path) -> None:
    summary = RunSummary.model_validate(BENCH_FIELDS)
    assert summary.completed == 8 and summary["p90_itl_ms"] == 3.0  # a declared field and an extra one
    assert summary.get("mean_ttft_ms") is None and "mean_ttft_ms" not in summary  # never written: missing
    with pytest.raises(KeyError):
        summary["mean_ttft_ms"]
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.baseline, parse_study(STUDY).baseline_config(), {})
    store.record_run(trial.id, 1, RunResult(scenario="a", summary=BENCH_FIELDS), started_at=0, ended_at=1)
    (raw,) = store._conn.execute("SELECT summary_json FROM runs").fetchone()
    assert json.loads(raw) == BENCH_FIELDS  # exactly the names written, no added keys
    (run,) = store.trial(trial.id).runs
    assert isinstance(run.summary, RunSummary) and run.summary == BENCH_FIELDS and run.ok


def _study(tmp_path: Path, candidates: int):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path / f"s{candidates}")
    rng = np.random.default_rng(5)
    _trial(store, spec, rng, "baseline", {}, 100)
    for i in range(candidates):
        _trial(store, spec, rng, "candidate", {"max-num-seqs": 8 + i}, 100)
    current = store.begin_trial(TrialRole.candidate, spec.config_for({"max-num-seqs": 99}), {"max-num-seqs": 99})
    return spec, store, current


def _reads_while(store: StudyStore, action) -> list[str]:
    """The SELECTs on trials or runs the store's connection ran during `action`."""
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        action()
    finally:
        store._conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith("SELECT") and (" trials" in s or " runs" in s)]


@pytest.mark.parametrize("action", ["enough_replicates", "history", "analyze"])
def test_analysis_after_a_replicate_reads_the_store_once_not_once_per_trial(tmp_path: Path, action: str) -> None:
    counts = []
    for candidates in (2, 12):
        spec, store, current = _study(tmp_path, candidates)
        for scenario in ("a", "b"):  # a replicate was just recorded: the cached study is stale
            store.record_run(current.id, 1, RunResult(scenario=scenario, summary={"output_throughput": 100.0}),
                             started_at=0, ended_at=1)
        call = {"enough_replicates": lambda: analysis.enough_replicates(store, spec, current, 1),
                "history": lambda: analysis.history(store, spec),
                "analyze": lambda: analysis.analyze(store, spec)}[action]
        counts.append(len(_reads_while(store, call)))
        assert _reads_while(store, call) == []  # nothing written since: the cached study answers
    assert counts == [2, 2]  # trials and runs, once each, however many trials there are


def test_a_commit_by_another_connection_is_seen(tmp_path: Path) -> None:
    spec = parse_study(STUDY)
    reader = StudyStore.in_dir(tmp_path)
    assert reader.trials() == []
    writer = StudyStore.open_existing(tmp_path)
    writer.begin_trial(TrialRole.baseline, spec.baseline_config(), {})
    assert [t.role for t in reader.trials()] == ["baseline"]


def test_a_read_only_store_reads_trials_with_their_runs(tmp_path: Path) -> None:
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    _trial(store, spec, np.random.default_rng(1), "baseline", {}, 100, reps=2)
    store.close()
    ro = StudyStore.open_existing(tmp_path, read_only=True)
    (trial,) = ro.trials()
    assert len(trial.runs) == 4 and all(r.trial_id == trial.id for r in trial.runs)
    with pytest.raises(sqlite3.OperationalError):
        ro._conn.execute("DELETE FROM runs")
