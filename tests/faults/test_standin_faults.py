"""Fault injection: studies of the stand-in engine (tests/fakes/standin_engine.py) with one fault
switched on per candidate, run as `servetune tune` subprocesses.

Each study is baseline -> candidate with the fault -> candidate `fault: none`, so a passing test
shows the fault's trial recorded with its class AND the study going on to a healthy trial and
finishing. After it: no process with the test's marker is left and every port a server was
launched on is free.
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fakes import standin
from tests.fakes.standin import TunerResult

# Stand-in studies judged by their stored outcomes and the processes left, never by time; the signals go
# to this test's own tuner once the store shows the state they interrupt: runs beside another test.
pytestmark = pytest.mark.concurrent

STUDY_TIMEOUT_S = 120  # a study here takes seconds; a hang is cut off and fails the test
# A stalled stream must be given up well before this: the client's per-read timeout and the
# per-run deadline (network branch) are derived from the scenario, which lasts < 1 s here.
STALL_TIMEOUT_S = 90


@dataclass
class Study:
    out: Path
    mark: str
    result: TunerResult

    def trials(self) -> list[sqlite3.Row]:
        conn = standin.read_only(self.out / "study.sqlite")
        try:
            return conn.execute("SELECT * FROM trials ORDER BY seq").fetchall()
        finally:
            conn.close()

    def runs(self, seq: int) -> list[sqlite3.Row]:
        conn = standin.read_only(self.out / "study.sqlite")
        try:
            return conn.execute("SELECT r.* FROM runs r JOIN trials t ON r.trial_id = t.id WHERE t.seq = ?",
                                (seq,)).fetchall()
        finally:
            conn.close()

    def outcomes(self) -> list[str | None]:
        return [t["outcome"] for t in self.trials()]

    def leftovers(self) -> list[psutil.Process]:
        return standin.standin_processes(self.mark)


def run_study(tmp_path: Path, marks: list[str], fault: str, *, args: dict[str, Any] | None = None,
              timeout_s: float = STUDY_TIMEOUT_S, extra_env: dict[str, str] | None = None,
              startup_timeout_s: float = 20, scenario: dict[str, Any] | None = None) -> Study:
    """baseline -> candidate `fault` -> candidate `fault: none` (only the first when `fault` is none)."""
    out = tmp_path / "study"
    study = tmp_path / "study.yaml"
    values = [fault] if fault == "none" else [fault, "none"]
    study.write_text(standin.study_text(f"fault-{fault}", args=args, space={"fault": values},
                                        startup_timeout_s=startup_timeout_s,
                                        scenarios=[{**standin.TINY_SCENARIO, **(scenario or {})}]))
    mark = standin.new_mark()
    marks.append(mark)
    result = standin.run_tuner(study, out, mark, timeout_s=timeout_s, extra_env=extra_env)
    return Study(out, mark, result)


def assert_survived(study: Study, fault_outcome: str) -> None:
    """The fault's trial has its class, the study went on to a healthy trial and finished, nothing is left."""
    assert study.result.returncode == 0, study.result.stderr[-3000:]
    assert study.outcomes() == ["ok", fault_outcome, "ok"], [(t["outcome"], t["detail"]) for t in study.trials()]
    assert [t["status"] for t in study.trials()] == ["done"] * 3
    assert "no winner" in study.result.stdout or "winner:" in study.result.stdout
    assert study.leftovers() == []
    assert standin.launched_ports(study.out) and standin.held_ports(study.out) == []


@pytest.mark.parametrize(("fault", "args", "outcome"), [
    ("crash-at-boot", {}, "crashed"),
    ("oom", {}, "oom"),
    ("crash-after", {"fault-after": 3}, "crashed"),
    ("ignore-sigterm", {}, "ok"),
    ("child-same-group", {}, "ok"),
    ("child-own-session", {}, "ok"),
    ("slow-chunks", {"fault-delay-ms": 20}, "ok"),
    ("partial-json", {}, "ok"),
])
def test_fault_is_classified_and_the_study_goes_on(tmp_path: Path, marks: list[str], fault: str,
                                                   args: dict[str, Any], outcome: str) -> None:
    study = run_study(tmp_path, marks, fault, args=args)
    assert_survived(study, outcome)
    if outcome == "ok":  # the fault's boot was measured like any other
        (run,) = study.runs(2)
        assert run["outcome"] == "ok" and run["error"] is None


def test_hang_before_health_is_a_startup_timeout(tmp_path: Path, marks: list[str]) -> None:
    study = run_study(tmp_path, marks, "hang-before-health", startup_timeout_s=2)
    assert_survived(study, "startup_timeout")


def test_oom_detail_quotes_the_engine(tmp_path: Path, marks: list[str]) -> None:
    study = run_study(tmp_path, marks, "oom")
    assert_survived(study, "oom")
    assert "CUDA out of memory" in study.trials()[1]["detail"]


def test_garbled_json_is_a_bad_response_and_the_study_goes_on(tmp_path: Path, marks: list[str]) -> None:
    study = run_study(tmp_path, marks, "garbled-json")
    assert_survived(study, "bad_response")
    (run,) = study.runs(2)
    assert run["error"] and "requests failed" in run["error"]


def test_http_500_on_completions_is_a_bad_response_and_the_study_goes_on(tmp_path: Path,
                                                                         marks: list[str]) -> None:
    study = run_study(tmp_path, marks, "http-500", args={"fault-endpoint": "/v1/completions"})
    assert_survived(study, "bad_response")
    (run,) = study.runs(2)
    assert run["error"] and "requests failed" in run["error"]


def test_stalled_stream_fails_the_run_and_the_study_goes_on(tmp_path: Path, marks: list[str]) -> None:
    # The scenario's own stall limit (the default allows minutes of silence, as a slow real server needs).
    study = run_study(tmp_path, marks, "stall", args={"fault-after": 2}, timeout_s=STALL_TIMEOUT_S,
                      scenario={"stall_timeout_s": 3})
    assert study.result.returncode == 0, "the study hung on a stalled stream (killed after the timeout)"
    assert study.outcomes() == ["ok", "stalled", "ok"], [(t["outcome"], t["detail"]) for t in study.trials()]
    assert study.leftovers() == [] and standin.held_ports(study.out) == []


@pytest.mark.parametrize("fault", ["http-500", "http-401"])
def test_models_endpoint_error_is_an_outcome_not_a_traceback(tmp_path: Path, marks: list[str], fault: str) -> None:
    study = run_study(tmp_path, marks, fault, args={"fault-endpoint": "/v1/models"})
    assert "Traceback" not in study.result.stderr, study.result.stderr[-2000:]
    assert study.result.returncode == 0
    outcomes = study.outcomes()
    assert outcomes[0] == "ok" and outcomes[2] == "ok" and outcomes[1] != "ok"
    assert study.leftovers() == []


def test_server_that_requires_an_api_key_is_tunable(tmp_path: Path, marks: list[str]) -> None:
    key = "sk-standin-" + os.urandom(8).hex()
    study = run_study(tmp_path, marks, "none", extra_env={"VLLM_API_KEY": key})
    assert study.result.returncode == 0, study.result.stderr[-2000:]
    assert study.outcomes() == ["ok", "ok"]
    assert all(r["outcome"] == "ok" and r["error"] is None for seq in (1, 2) for r in study.runs(seq))


def test_double_forked_child_holding_the_port_is_stopped_by_teardown(tmp_path: Path, marks: list[str]) -> None:
    study = run_study(tmp_path, marks, "double-fork")
    assert study.result.returncode == 0, study.result.stderr[-2000:]
    trials = study.trials()
    assert [t["status"] for t in trials] == ["done"] * 3
    # The daemon left the server's group and session but inherited the trial's launch token, which
    # proves it ours: teardown stops it, so the port is free for the next trial (a holder that is
    # not ours is reported instead: tests/unit/test_engine_teardown.py).
    assert [t["outcome"] for t in trials] == ["ok", "ok", "ok"], [(t["outcome"], t["detail"]) for t in trials]
    assert not (trials[1]["detail"] or ""), trials[1]["detail"]
    assert study.leftovers() == [] and standin.held_ports(study.out) == []


# --- kills of the tuner ------------------------------------------------------------------------

def _wait_for(predicate: Any, timeout_s: float, what: str, tuner: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if tuner is not None and tuner.poll() is not None:
            raise AssertionError(f"the tuner exited ({tuner.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _runs_of(db: Path, seq: int) -> int:
    return len([k for k in standin.stored_runs(db) if k[0] == seq]) if db.exists() else 0


def _resume_to_the_end(study_file: Path, out: Path, mark: str) -> TunerResult:
    done = standin.run_tuner(study_file, out, mark, timeout_s=STUDY_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _kill_study(tmp_path: Path, marks: list[str], fault: str, replicates: int = 3) -> tuple[Path, Path, str]:
    study_file = tmp_path / "study.yaml"
    study_file.write_text(standin.study_text(f"kill-{fault.replace(',', '-')}", space={"fault": [fault]}, replicates=replicates,
                                             args={"fault-delay-ms": 40, "fault": "none"}))
    mark = standin.new_mark()
    marks.append(mark)
    return study_file, tmp_path / "study", mark


def _sigkill_once_trial_2_measures(study_file: Path, out: Path, mark: str) -> None:
    tuner = standin.start_tuner(study_file, out, mark)
    try:
        _wait_for(lambda: _runs_of(out / "study.sqlite", 2) >= 1, STUDY_TIMEOUT_S, "a run of trial 2", tuner)
    finally:
        tuner.kill()
        tuner.wait()


def test_sigkill_mid_trial_then_resume_leaves_nothing(tmp_path: Path, marks: list[str]) -> None:
    study_file, out, mark = _kill_study(tmp_path, marks, "slow-chunks")
    db = out / "study.sqlite"
    _sigkill_once_trial_2_measures(study_file, out, mark)
    seen: dict[standin.RunKey, tuple[Any, ...]] = {}
    assert standin.store_problems(db, seen) == []
    left = standin.standin_processes(mark)
    assert left and {os.getpgid(p.pid) for p in left} <= standin.recorded_servers(db)  # recorded, so recoverable
    _resume_to_the_end(study_file, out, mark)
    assert standin.store_problems(db, seen) == []
    assert standin.standin_processes(mark) == [] and standin.held_ports(out) == []


def test_resume_stops_a_group_whose_leader_is_gone(tmp_path: Path, marks: list[str]) -> None:
    study_file, out, mark = _kill_study(tmp_path, marks, "child-same-group,slow-chunks")
    db = out / "study.sqlite"
    _sigkill_once_trial_2_measures(study_file, out, mark)
    (pgid,) = standin.recorded_servers(db)
    os.kill(pgid, signal.SIGKILL)  # the leader (a stand-in this test started) dies; its child stays in the group
    # Until its zombie is reaped (by init, its parent being dead), the leader still "exists" and
    # recovery finds the group through it; the case to prove is a leader that is really gone.
    _wait_for(lambda: not psutil.pid_exists(pgid), 30, "the leader to be reaped")
    assert standin.standin_processes(mark)  # the leaderless child
    _resume_to_the_end(study_file, out, mark)
    assert standin.standin_processes(mark) == []


def test_sigterm_during_teardown_still_stops_the_server(tmp_path: Path, marks: list[str]) -> None:
    study_file, out, mark = _kill_study(tmp_path, marks, "ignore-sigterm", replicates=1)
    tuner = standin.start_tuner(study_file, out, mark)
    try:
        # The candidate's server ignores SIGTERM, so its teardown sits in the grace period.
        _wait_for(lambda: any("SIGTERM ignored" in p.read_text(errors="replace")
                              for p in (out / "logs").glob("trial002-*.log")), STUDY_TIMEOUT_S,
                  "the candidate's server to ignore a SIGTERM", tuner)
        tuner.send_signal(signal.SIGTERM)
        tuner.wait(60)
    finally:
        tuner.kill()
        tuner.wait()
    assert standin.standin_processes(mark) == []
    _resume_to_the_end(study_file, out, mark)
    assert standin.standin_processes(mark) == [] and standin.held_ports(out) == []


# --- disk full while writing the store ---------------------------------------------------------

FSIZE_LIMIT = 96 * 1024  # bytes: the store's write-ahead log passes this within the first trials


def _small_files() -> None:
    """In the tuner's child (preexec): writes past the limit fail with EFBIG instead of killing it."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))


@pytest.fixture(scope="module")
def disk_full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str, TunerResult]]:
    tmp = tmp_path_factory.mktemp("disk-full")
    study_file = tmp / "study.yaml"
    study_file.write_text(standin.study_text("disk-full", space={"max-num-seqs": [2, 4, 8]}, replicates=2))
    mark = standin.new_mark()
    result = standin.run_tuner(study_file, tmp / "study", mark, timeout_s=STUDY_TIMEOUT_S, preexec_fn=_small_files)
    yield study_file, tmp / "study", mark, result
    standin.kill_marked(mark)


def test_disk_full_keeps_the_store_whole_and_resumable(disk_full: tuple[Path, Path, str, TunerResult]) -> None:
    study_file, out, mark, result = disk_full
    assert result.returncode not in (0, None), "the tuner went on although its store could not be written"
    db = out / "study.sqlite"
    seen: dict[standin.RunKey, tuple[Any, ...]] = {}
    assert standin.store_problems(db, seen) == []
    assert standin.standin_processes(mark) == []
    done = _resume_to_the_end(study_file, out, mark)  # no limit now
    assert "winner" in done.stdout
    assert standin.store_problems(db, seen) == []
    conn = standin.read_only(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM trials WHERE status != 'done'").fetchone()[0] == 0
    finally:
        conn.close()


def test_disk_full_is_a_one_line_error(disk_full: tuple[Path, Path, str, TunerResult]) -> None:
    _, _, _, result = disk_full
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error:") and "Traceback" not in result.stderr, result.stderr[-2000:]
