"""Two slots of real vLLM CPU servers, each pinned to its own core, through `servetune tune`."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from servetune.engine.launch import LAUNCH_TOKEN_ENV
from servetune.store import StudyStore
from tests.conftest import servetune

STUDY = Path(__file__).parent / "studies" / "slots.yaml"
pytestmark = pytest.mark.vllm


def test_two_cpu_slots_run_a_study_to_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "slots"
    done = servetune("tune", str(STUDY), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    store = StudyStore.open_existing(out, read_only=True)
    trials = store.trials()
    assert all(t.status == "done" and t.outcome == "ok" for t in trials), [(t.role, t.outcome, t.detail) for t in trials]
    # Each slot booted the baseline first, on its own core; the two candidates are different configs.
    for slot in (0, 1):
        mine = [t for t in trials if t.slot == slot]
        assert mine and mine[0].role == "baseline"
        assert mine[0].placement["cpus"] and len(mine[0].placement["cpus"]) == 1
    assert {tuple(t.placement["cpus"]) for t in trials} == {(0,), (1,)}
    candidates = [t.config.key() for t in trials if t.role == "candidate"]
    assert len(candidates) == len(set(candidates)) == 2
    # The two slots' trials overlapped in time: they ran at once, not one after the other.
    first = [t for t in trials if t.role == "baseline"]
    assert max(t.started_at for t in first) < min(t.ended_at for t in first)
    for t in trials:
        assert len([r for r in store.runs(t.id) if r.outcome == "ok"]) == 2
    verdict = store.get_meta_json("verdict")
    assert verdict["reason"]
    assert "| slot |" in (out / "report.md").read_text()
    # No server of the study is left.
    tokens = {t.launch_token for t in trials}
    for proc in psutil.process_iter():
        try:
            assert proc.environ().get(LAUNCH_TOKEN_ENV) not in tokens
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
