"""End-to-end studies on the real vLLM CPU build, through the `servetune` command itself.

Slow by nature (every trial boots a server): the example study, and an A/A study that is
SIGKILLed mid-trial, resumed, and must name no winner.
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

from servetune.store import StudyStore
from servetune.study import load_study
from servetune.tune import analysis
from servetune.tune.ofat_audit import off_one_factor
from tests.conftest import ExampleStudy, servetune

REPO = Path(__file__).resolve().parents[2]
STUDIES = Path(__file__).parent / "studies"
pytestmark = pytest.mark.vllm


# Its checks are of the study's shape, not of who won; the study is shared with test_report_vllm.py.
@pytest.mark.concurrent
@pytest.mark.xdist_group("example_study")
def test_example_study_runs_to_a_verdict(example_study: ExampleStudy) -> None:
    spec = load_study(example_study.study_file)
    store = StudyStore.open_existing(example_study.out)
    trials = store.trials()
    assert trials[0].role == "baseline" and trials[0].outcome == "ok"
    assert all(t.status == "done" for t in trials)
    candidates = [t for t in trials if t.role == "candidate"]
    assert 1 <= len(candidates) <= spec.budget.trials
    # OFAT changes one parameter at a time from the incumbent of its time
    baseline = spec.baseline_config()
    assert off_one_factor(store, spec) == []
    # enable-prefix-caching=True is what vLLM 0.32 runs when the flag is unset: never booted again
    duplicates = [t for t in candidates if t.outcome == "duplicate"]
    assert any(t.params.get("enable-prefix-caching") is True and t.launch_token is None
               and "enable-prefix-caching=True is vLLM's default here" in (t.detail or "") for t in duplicates)
    assert all(t.launch_token is not None for t in candidates if t.outcome not in ("duplicate", "skipped"))
    # every ok trial measured every scenario at least min-replicates times
    for t in trials:
        if t.outcome == "ok":
            runs = store.runs(t.id)
            for name in spec.scenario_names:
                assert len([r for r in runs if r.scenario == name]) >= spec.replicates.min
                assert all(r.summary["completed"] > 0 for r in runs)
    # the boot log was parsed and the applied check ran on every booted trial
    assert trials[0].boot_facts is not None and (trials[0].boot_facts.kv_cache_tokens or 0) > 0
    result = analysis.analyze(store, spec)
    assert result.baseline is not None and result.baseline.objective is not None
    assert result.winner_reason
    verdict = store.verdict()
    assert verdict is not None and verdict.reason == result.winner_reason
    assert (example_study.out / "report.md").is_file() and (example_study.out / "report.html").is_file()
    assert baseline.key() == trials[0].config.key()
    status = servetune("status", str(example_study.out))
    assert status.returncode == 0 and "trials done" in status.stdout


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
    # engine.pin_engine_core went through the runner to every boot, the resumed one too
    assert all("pinned EngineCore" in (t.detail or "") for t in trials), [t.detail for t in trials]

    result = analysis.analyze(store, spec)
    compared = [c for c in result.configs if not c.is_baseline and c.objective_effect is not None]
    assert len(compared) == 2  # both identical candidates were measured and tested
    assert result.winner is None, result.winner_reason
    assert "no winner" in done.stdout
