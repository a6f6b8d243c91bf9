"""Two slots of stand-in servers (tests/fakes/standin_engine.py, real processes) and the tuner
stopped while both are busy: Ctrl-C leaves no process, a SIGKILL of the driver is resumed with
nothing lost or counted twice."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import standin
from tests.faults.test_standin_faults import STUDY_TIMEOUT_S, _resume_to_the_end, _wait_for

# As test_standin_faults.py: judged by the store and the processes left, signals only to its own tuner.
pytestmark = pytest.mark.concurrent

SPACE = {"max-num-seqs": [2, 4, 8, 16]}
REPLICATES = 3  # a trial measures long enough after its first stored run that both slots are seen busy at once


def _two_slot_study(tmp_path: Path, marks: list[str]) -> tuple[Path, Path, str]:
    """A grid of 4 candidates on 2 slots whose runs are slow enough (40 ms a chunk) to catch both busy."""
    spec = json.loads(standin.study_text("slots", space=SPACE, replicates=REPLICATES, trials=4,
                                         args={"fault": "slow-chunks", "fault-delay-ms": 40}))
    spec["parallel"] = {"slots": 2}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(json.dumps(spec))
    mark = standin.new_mark()
    marks.append(mark)
    return study_file, tmp_path / "study", mark


def _rows(db: Path, sql: str) -> list[sqlite3.Row]:
    if not db.exists():
        return []
    conn = standin.read_only(db)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # no schema yet
        return []
    finally:
        conn.close()


def _both_slots_measuring(db: Path) -> bool:
    """Two running trials on different slots, each with a recorded server and a stored run."""
    rows = _rows(db, "SELECT t.slot FROM trials t WHERE t.status = 'running' AND t.server_pid IS NOT NULL"
                     " AND EXISTS (SELECT 1 FROM runs r WHERE r.trial_id = t.id)")
    return len({r[0] for r in rows}) == 2


def _stop_when_both_slots_measure(study_file: Path, out: Path, mark: str, sig: signal.Signals) -> int:
    tuner = standin.start_tuner(study_file, out, mark)
    try:
        _wait_for(lambda: _both_slots_measuring(out / "study.sqlite"), STUDY_TIMEOUT_S,
                  "two slots measuring at once", tuner)
        tuner.send_signal(sig)
        return tuner.wait(60)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()


def test_ctrl_c_with_two_slots_busy_leaves_no_process(tmp_path: Path, marks: list[str]) -> None:
    study_file, out, mark = _two_slot_study(tmp_path, marks)
    _stop_when_both_slots_measure(study_file, out, mark, signal.SIGINT)
    assert standin.wait_gone(mark, 5) == []
    assert standin.held_ports(out) == []
    # Both interrupted trials stay `running`, to be resumed: nothing was recorded as a failure.
    db = out / "study.sqlite"
    assert len(_rows(db, "SELECT id FROM trials WHERE status = 'running'")) == 2
    assert _rows(db, "SELECT id FROM trials WHERE outcome IS NOT NULL AND outcome != 'ok'") == []


def test_driver_killed_with_two_slots_busy_resumes_with_nothing_lost_or_twice(tmp_path: Path,
                                                                               marks: list[str]) -> None:
    study_file, out, mark = _two_slot_study(tmp_path, marks)
    db = out / "study.sqlite"
    _stop_when_both_slots_measure(study_file, out, mark, signal.SIGKILL)
    seen: dict[standin.RunKey, tuple[Any, ...]] = {}
    assert standin.store_problems(db, seen) == []
    before = len(seen)
    _resume_to_the_end(study_file, out, mark)
    assert standin.store_problems(db, seen) == []  # no run lost, changed, duplicated or measured twice at once
    assert standin.standin_processes(mark) == [] and standin.held_ports(out) == []
    trials = _rows(db, "SELECT id, role, config_key, status, outcome FROM trials ORDER BY seq")
    assert all(t["status"] == "done" and t["outcome"] == "ok" for t in trials)
    candidates = [t["config_key"] for t in trials if t["role"] == "candidate"]
    assert len(candidates) == len(set(candidates)) == len(SPACE["max-num-seqs"])  # each config once
    for trial in trials:  # every trial measured every replicate exactly once, whichever session did it
        ok = _rows(db, f"SELECT replicate FROM runs WHERE trial_id = {trial['id']} AND outcome = 'ok'")
        assert sorted(r[0] for r in ok) == list(range(1, REPLICATES + 1)), trial["role"]
    assert len(seen) > before
