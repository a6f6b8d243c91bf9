"""The study store: rows round-trip, a kill mid-trial leaves a resumable state, wall time adds up."""

from __future__ import annotations

import sqlite3

import pytest

from servetune.engine.config import Config
from servetune.errors import ServetuneError
from servetune.load.records import RunResult
from servetune.store import StudyStore


def test_trial_and_runs_round_trip(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    config = Config.of({"max-num-seqs": 8, "enable-prefix-caching": False}, {"OMP_NUM_THREADS": 1})
    trial = store.begin_trial("candidate", config, {"max-num-seqs": 8})
    assert trial.status == "running" and trial.seq == 1
    store.record_server(trial.id, pid=123, pgid=123, create_time=1.5, log_path="logs/t.log")
    store.record_boot(trial.id, healthy_at=trial.started_at + 80, boot_facts={"kv_cache_tokens": 1024},
                      mismatches=[{"flag": "x"}], log_path=None)
    store.record_run(trial.id, 1, RunResult(scenario="chat", summary={"output_throughput": 12.5}),
                     started_at=10.0, ended_at=13.0)
    store.finish_trial(trial.id, "ok")

    reopened = StudyStore.open_existing(tmp_path)
    (row,) = reopened.trials()
    assert row.config == config and row.config.key() == config.key()
    assert row.params == {"max-num-seqs": 8}
    assert row.outcome == "ok" and row.status == "done"
    assert row.boot_facts == {"kv_cache_tokens": 1024} and row.mismatches == [{"flag": "x"}]
    assert row.boot_s == pytest.approx(80)
    assert row.log_path == "logs/t.log"
    (run,) = reopened.runs(row.id)
    assert run.summary == {"output_throughput": 12.5} and run.wall_s == pytest.approx(3.0)


def test_a_run_is_recorded_once(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial("baseline", Config(), {})
    store.record_run(trial.id, 1, RunResult(scenario="a"), started_at=0, ended_at=1)
    with pytest.raises(sqlite3.IntegrityError):
        store.record_run(trial.id, 1, RunResult(scenario="a"), started_at=0, ended_at=1)
    assert len(store.runs()) == 1


def test_interrupted_trial_is_found_and_reopened(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial("candidate", Config.of({"a": 1}), {"a": 1})
    store.record_server(trial.id, pid=99, pgid=99, create_time=2.0, log_path="x.log")
    store.record_run(trial.id, 1, RunResult(scenario="a"), started_at=0, ended_at=1)
    store.close()  # the process dies here

    resumed = StudyStore.open_existing(tmp_path)
    (unfinished,) = resumed.unfinished_trials()
    assert (unfinished.server_pid, unfinished.server_create_time) == (99, 2.0)
    resumed.reopen_trial(unfinished.id)
    again = resumed.trial(unfinished.id)
    assert again.server_pid is None and again.status == "running"
    assert len(resumed.runs(unfinished.id)) == 1  # measured runs survive the kill


def test_wall_time_counts_killed_sessions_to_last_heartbeat(tmp_path, monkeypatch):
    clock = iter([100.0, 160.0, 1000.0, 1030.0])
    monkeypatch.setattr("servetune.store.sqlite.time.time", lambda: next(clock))
    store = StudyStore.in_dir(tmp_path)
    first = store.begin_session()      # 100
    store.heartbeat(first)             # 160, then killed
    second = store.begin_session()     # 1000
    store.end_session(second, "finished")  # 1030
    assert store.elapsed_wall_s() == pytest.approx(60 + 30)


def test_open_existing_without_store_is_a_clear_error(tmp_path):
    with pytest.raises(ServetuneError, match="no study store"):
        StudyStore.open_existing(tmp_path)
