"""End-to-end studies on the real vLLM CPU build, through the `servetune` command itself.

Slow by nature (every trial boots a server): an A/A study that is SIGKILLed mid-trial, resumed,
and must name no winner. The example study's checks are in test_example_study_vllm.py.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from servetune.analysis import analysis
from servetune.store import StudyStore
from servetune.study import load_study
from tests.conftest import servetune

REPO = Path(__file__).resolve().parents[2]
STUDIES = Path(__file__).parent / "studies"
pytestmark = pytest.mark.vllm


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # schema not created yet
        return 0
    finally:
        conn.close()


def test_aa_study_sigkilled_mid_trial_resumes_losing_nothing_and_names_no_winner(tmp_path: Path) -> None:
    """One study for two checks that each need real boots: resuming after the tuner's SIGKILL
    (vLLM's server and EngineCore outlive it, and the resumed tuner must stop them) and the A/A
    verdict (candidates that differ from the baseline only by a variable vLLM ignores: any winner
    would be a false one)."""
    study = STUDIES / "aa.yaml"
    db = tmp_path / "study.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "servetune", "tune", str(study), "--out", str(tmp_path)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Kill while the second trial (first candidate) is measuring: its server is up and one run is stored.
        _wait_for(lambda: _count(db, "SELECT COUNT(*) FROM runs r JOIN trials t ON r.trial_id = t.id"
                                     " WHERE t.seq = 2") >= 1, 1800, "a run of trial 2")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = StudyStore.open_existing(tmp_path)
    (orphaned,) = store.unfinished_trials()
    left_pid = orphaned.server_pid
    assert left_pid is not None and psutil.pid_exists(left_pid)  # the server outlived its tuner
    runs_before = {(r.trial_id, r.scenario, r.replicate) for r in store.runs()}
    store.close()

    done = servetune("tune", str(study), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not psutil.pid_exists(left_pid) or psutil.Process(left_pid).status() == psutil.STATUS_ZOMBIE

    spec = load_study(study)
    store = StudyStore.open_existing(tmp_path)
    trials = store.trials()
    assert [t.seq for t in trials] == list(range(1, len(trials) + 1))
    assert all(t.status == "done" and t.outcome == "ok" for t in trials), [(t.role, t.outcome) for t in trials]
    screened = [t for t in trials if t.role in ("baseline", "candidate")]
    assert [t.role for t in screened] == ["baseline", "candidate", "candidate"] == [t.role for t in trials[:3]]
    assert len({t.config.key() for t in screened}) == 3  # no config screened twice
    runs = [r for r in store.runs() if r.outcome == "ok"]  # client-bound attempts are kept as evidence
    keys = [(r.trial_id, r.scenario, r.replicate) for r in runs]
    assert len(keys) == len(set(keys))                 # nothing duplicated
    assert runs_before <= {(r.trial_id, r.scenario, r.replicate) for r in store.runs()}  # nothing lost
    for t in screened:
        assert sorted(r.replicate for r in runs if r.trial_id == t.id) == list(range(1, spec.replicates.max + 1))
    assert [s.end_reason for s in store.sessions()] == [None, "finished"]
    # engine.pin_engine_core went through the runner to every boot, the resumed one too, and the
    # load client measured from the API server's cores
    assert all("pinned EngineCore" in (t.detail or "") and "load client on [" in (t.detail or "")
               for t in trials), [t.detail for t in trials]

    result = analysis.analyze(store, spec)
    compared = [c for c in result.configs if not c.is_baseline and c.objective_effect is not None]
    assert len(compared) == 2  # both identical candidates were measured and tested
    assert result.winner is None, result.winner_reason
    assert "no winner" in done.stdout
