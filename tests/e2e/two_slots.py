"""What every two-slot study of tests/e2e/studies/slots.yaml must show, on threads or on Ray."""

from __future__ import annotations

from pathlib import Path

import psutil

from servetune.engine.launch import LAUNCH_TOKEN_ENV
from servetune.store import StudyStore
from servetune.store.model import Trial


def check_two_slot_study(out: Path) -> list[Trial]:
    """Every trial ok with both replicates; each slot booted the baseline first on its own core;
    the two candidates are different configs; the slots' baselines overlapped in time; a
    verdict; no server of the study left. Returns the trials for the backend's own checks."""
    store = StudyStore.open_existing(out, read_only=True)
    trials = store.trials()
    assert all(t.status == "done" and t.outcome == "ok" for t in trials), [(t.role, t.outcome, t.detail) for t in trials]
    for slot in (0, 1):
        mine = [t for t in trials if t.slot == slot]
        assert mine and mine[0].role == "baseline"
    assert {t.placement.cpus for t in trials if t.placement} == {(0,), (1,)} and all(t.placement for t in trials)
    candidates = [t.config.key() for t in trials if t.role == "candidate"]
    assert len(candidates) == len(set(candidates)) == 2
    first = [t for t in trials if t.role == "baseline"]
    assert max(t.started_at for t in first) < min(t.ended_at for t in first)  # at once, not one after the other
    for t in trials:
        assert len([r for r in store.runs(t.id) if r.outcome == "ok"]) == 2
    verdict = store.verdict()
    assert verdict is not None and verdict.reason
    tokens = {t.launch_token for t in trials}
    for proc in psutil.process_iter():
        try:
            assert proc.environ().get(LAUNCH_TOKEN_ENV) not in tokens
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return trials
