"""The study store: rows round-trip, a kill mid-trial leaves a resumable state, wall time adds up."""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest

from servetune.engine.applied import AppliedMismatch
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.placement import Placement
from servetune.errors import ServetuneError
from servetune.load.records import RunResult
from servetune.store import EtaEntry, PlannedTrial, StudyStore, TrialRole, Verdict
from servetune.store.schema import SCHEMA_VERSION
from servetune.vocabulary import Outcome

MISMATCH = AppliedMismatch(flag="x", requested=1, applied=2, evidence_line=None, reason="capped")


def test_trial_and_runs_round_trip(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    config = Config.of({"max-num-seqs": 8, "enable-prefix-caching": False}, {"OMP_NUM_THREADS": 1})
    trial = store.begin_trial(TrialRole.candidate, config, {"max-num-seqs": 8})
    assert trial.status == "running" and trial.seq == 1
    store.record_server(trial.id, pid=123, pgid=123, create_time=1.5, log_path="logs/t.log")
    store.record_boot(trial.id, healthy_at=trial.started_at + 80, boot_facts=BootFacts(kv_cache_tokens=1024),
                      mismatches=[MISMATCH], log_path=None)
    store.record_run(trial.id, 1, RunResult(scenario="chat", summary={"output_throughput": 12.5}),
                     started_at=10.0, ended_at=13.0)
    store.finish_trial(trial.id, Outcome.ok)

    reopened = StudyStore.open_existing(tmp_path)
    (row,) = reopened.trials()
    assert row.config == config and row.config.key() == config.key()
    assert row.params == {"max-num-seqs": 8}
    assert row.outcome == "ok" and row.status == "done"
    assert row.boot_facts is not None and row.boot_facts.kv_cache_tokens == 1024
    assert row.mismatches == [MISMATCH]
    assert row.boot_s == pytest.approx(80)
    assert row.log_path == "logs/t.log"
    (run,) = reopened.runs(row.id)
    assert run.summary == {"output_throughput": 12.5} and run.wall_s == pytest.approx(3.0)


def test_a_run_is_recorded_once(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.baseline, Config(), {})
    store.record_run(trial.id, 1, RunResult(scenario="a"), started_at=0, ended_at=1)
    with pytest.raises(sqlite3.IntegrityError):
        store.record_run(trial.id, 1, RunResult(scenario="a"), started_at=0, ended_at=1)
    assert len(store.runs()) == 1


def test_interrupted_trial_is_found_and_reopened(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.candidate, Config.of({"a": 1}), {"a": 1})
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


def test_a_reopened_trial_keeps_its_earlier_boots_in_the_cost(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.candidate, Config.of({"a": 1}), {"a": 1})
    store.record_boot(trial.id, healthy_at=trial.started_at + 60, boot_facts=None, mismatches=[], log_path=None)
    store.reopen_trial(trial.id)          # killed after its boot: booted again
    store.reopen_trial(trial.id)          # killed while booting: that boot never became healthy
    again = store.trial(trial.id)
    assert (again.boots, again.boot_s, again.total_boot_s) == (1, None, pytest.approx(60))
    store.record_boot(trial.id, healthy_at=again.started_at + 75, boot_facts=None, mismatches=[], log_path=None)
    last = StudyStore.open_existing(tmp_path).trial(trial.id)
    assert (last.boots, last.boot_s, last.total_boot_s) == (2, pytest.approx(75), pytest.approx(135))


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


# The trials and sessions tables as schema version 1 wrote them (before owners and launch tokens).
SCHEMA_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, role TEXT NOT NULL, config_key TEXT NOT NULL,
    config_json TEXT NOT NULL, params_json TEXT NOT NULL, status TEXT NOT NULL, outcome TEXT, detail TEXT,
    log_path TEXT, log_tail TEXT, boot_facts_json TEXT, mismatches_json TEXT, server_pid INTEGER,
    server_pgid INTEGER, server_create_time REAL, started_at REAL NOT NULL, healthy_at REAL, ended_at REAL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id), scenario TEXT NOT NULL,
    replicate INTEGER NOT NULL, attempt INTEGER NOT NULL DEFAULT 1, outcome TEXT NOT NULL,
    summary_json TEXT NOT NULL, server_stats_json TEXT NOT NULL, client_health_json TEXT NOT NULL,
    records_path TEXT, error TEXT, started_at REAL NOT NULL, ended_at REAL NOT NULL,
    UNIQUE (trial_id, scenario, replicate, attempt)
);
CREATE TABLE sessions (id INTEGER PRIMARY KEY, started_at REAL NOT NULL, last_seen REAL NOT NULL,
                       ended_at REAL, end_reason TEXT);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO trials(seq, role, config_key, config_json, params_json, status, server_pid, server_pgid,
                   server_create_time, started_at)
    VALUES (1, 'baseline', 'k', '{"flags": {}, "env": {}}', '{}', 'running', 99, 99, 2.0, 1.0);
INSERT INTO sessions(started_at, last_seen) VALUES (1.0, 5.0);
"""


def test_a_version_1_store_is_migrated_and_keeps_its_rows(tmp_path):
    old = sqlite3.connect(tmp_path / StudyStore.FILENAME)
    old.executescript(SCHEMA_V1)
    old.close()

    store = StudyStore.open_existing(tmp_path)
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    (trial,) = store.unfinished_trials()
    assert (trial.server_pid, trial.session_id, trial.launch_token) == (99, None, None)  # owner unknown
    assert (trial.slot, trial.placement) == (0, None)  # from before slots: the one slot there was
    assert (trial.cache, trial.exclusion, trial.replaces) == (None, None, None)  # from before caches: unknown
    assert trial.machine is None  # from before machine records: unknown
    (old_session,) = store.sessions()
    assert (old_session.last_seen, old_session.pid) == (5.0, None)
    session = store.begin_session(pid=7, host="h", pid_create_time=3.0)
    store.reopen_trial(trial.id, session_id=session)
    assert store.trial(trial.id).session_id == session and store.session(session).pid == 7


def test_the_published_h200_study_still_opens(tmp_path):
    archive = Path(__file__).resolve().parents[2] / "docs/results/h200/qwen3-8b-ofat.tar.xz"
    with tarfile.open(archive) as tar:
        member = tar.getmember("qwen3-8b-ofat/study.sqlite")
        tar.extractall(tmp_path, members=[member], filter="data")
    store = StudyStore.open_existing(tmp_path / "qwen3-8b-ofat")
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    trials = store.trials()
    assert len(trials) >= 9 and all(t.session_id is None for t in trials)
    assert all(t.cache is None and t.exclusion is None for t in trials)
    assert store.runs() and store.sessions()


def test_a_store_from_a_newer_servetune_is_refused(tmp_path):
    StudyStore.in_dir(tmp_path).set_meta("schema_version", "99")
    with pytest.raises(ServetuneError, match=f"store schema version 99, this servetune reads {SCHEMA_VERSION}"):
        StudyStore.open_existing(tmp_path)


def test_a_trial_keeps_its_slot_and_placement_out_of_the_config_key(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    config = Config.of({"max-num-seqs": 4})
    placement = Placement(1, {"CUDA_VISIBLE_DEVICES": "1"}, where={"node": "gpu7 (10.0.0.7)", "worker_pid": "41"})
    trial = store.begin_trial(TrialRole.candidate, config, {"max-num-seqs": 4}, slot=1, placement=placement)
    again = store.trial(trial.id)
    assert (again.slot, again.placement) == (1, placement)
    # Stored as the JSON object every version reads and writes (an older store's reads back the same).
    raw = sqlite3.connect(tmp_path / "study.sqlite").execute("SELECT placement_json FROM trials").fetchone()[0]
    assert json.loads(raw) == {"slot": 1, "env": {"CUDA_VISIBLE_DEVICES": "1"}, "cpus": None,
                               "node": "gpu7 (10.0.0.7)", "worker_pid": "41"}
    assert again.config.key() == config.key() and "CUDA_VISIBLE_DEVICES" not in again.config.env
    store.move_trial(trial.id, slot=0, placement=None)
    assert (store.trial(trial.id).slot, store.trial(trial.id).placement) == (0, None)


def test_the_meta_getters_read_and_write_the_json_every_version_keeps(tmp_path):
    store = StudyStore.in_dir(tmp_path)
    assert (store.spec_doc(), store.final_plan(), store.eta_log(), store.verdict()) == (None, None, [], None)
    # As servetune has always written them:
    store.set_meta_json("spec", {"name": "s"})
    store.set_meta_json("final_plan", [["baseline_final", "k0"], ["finalist", "k1"]])
    store.set_meta_json("eta_log", [{"trial_seq": 1, "at": 10.0, "predicted_end": 70.0}])
    store.set_meta_json("verdict", {"winner": None, "reason": "no config beat the baseline"})
    assert store.spec_doc() == {"name": "s"}
    assert store.final_plan() == [PlannedTrial(TrialRole.baseline_final, "k0"), PlannedTrial(TrialRole.finalist, "k1")]
    assert store.eta_log() == [EtaEntry(1, 10.0, 70.0)]
    assert store.verdict() == Verdict(None, "no config beat the baseline")
    # ... and written back in the same shapes.
    store.set_final_plan([PlannedTrial(TrialRole.baseline_final, "k0")])
    store.log_eta(EtaEntry(2, 20.0, 60.0))
    store.set_verdict(Verdict("k1", "k1 is faster"))
    assert store.get_meta_json("final_plan") == [["baseline_final", "k0"]]
    assert store.get_meta_json("eta_log") == [{"trial_seq": 1, "at": 10.0, "predicted_end": 70.0},
                                              {"trial_seq": 2, "at": 20.0, "predicted_end": 60.0}]
    assert store.get_meta_json("verdict") == {"winner": "k1", "reason": "k1 is faster"}
    store.set_meta_json("eta_log", [{"trial_seq": 1}])
    with pytest.raises(ValueError, match="meta 'eta_log': unreadable entry"):
        store.eta_log()


def test_a_trial_keeps_its_machine_and_a_run_its_samples(tmp_path):
    from servetune.machine import MachineRecord, RunMachine
    from servetune.machine.record import GpuState

    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.baseline, Config.of({}), {})
    record = MachineRecord(source="nvml", taken_at=1.0, driver="550.54.15", cuda="12.4",
                           gpus=(GpuState(index=0, name="H100", power_limit_w=700.0),))
    store.record_machine(trial.id, record)
    machine = RunMachine(source="nvml", interval_s=1.0, wall_s=3.0, samples=({"t": 1.0, "power_w": 350.0},),
                         energy_j=1050.0, energy_source="energy counter", throttled={"power cap": 0.5})
    store.record_run(trial.id, 1, RunResult(scenario="s", summary={"output_throughput": 1.0}), started_at=0,
                     ended_at=3, machine=machine)
    store.record_run(trial.id, 2, RunResult(scenario="s", summary={"output_throughput": 1.0}), started_at=3,
                     ended_at=6)
    reread = StudyStore.open_existing(tmp_path, read_only=True).trial(trial.id)
    assert reread.machine == record
    assert [r.machine for r in reread.runs] == [machine, None]
