"""Two slots of real vLLM CPU servers as actors of a local Ray cluster (`servetune tune --ray auto`
starts one for the study): the study of tests/e2e/studies/slots.yaml reaches its verdict as the
thread slots do, every trial placed by Ray on this node, and nothing is left afterwards."""

from __future__ import annotations

import socket
from pathlib import Path

import psutil
import pytest

from servetune.engine.launch import LAUNCH_TOKEN_ENV
from servetune.store import StudyStore
from tests.conftest import servetune

STUDY = Path(__file__).parent / "studies" / "slots.yaml"
pytestmark = pytest.mark.vllm


def test_two_ray_slots_of_real_vllm_run_a_study_to_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "ray-slots"
    done = servetune("tune", str(STUDY), "--out", str(out), "--ray", "auto")
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    store = StudyStore.open_existing(out, read_only=True)
    trials = store.trials()
    assert all(t.status == "done" and t.outcome == "ok" for t in trials), [(t.role, t.outcome, t.detail) for t in trials]
    for slot in (0, 1):  # each Ray slot booted the baseline first, on its own core of this node
        mine = [t for t in trials if t.slot == slot]
        assert mine and mine[0].role == "baseline"
        assert mine[0].placement["node"].startswith(f"{socket.gethostname()} (") and mine[0].placement["ray_node_id"]
    assert {tuple(t.placement["cpus"]) for t in trials} == {(0,), (1,)}
    candidates = [t.config.key() for t in trials if t.role == "candidate"]
    assert len(candidates) == len(set(candidates)) == 2
    first = [t for t in trials if t.role == "baseline"]
    assert max(t.started_at for t in first) < min(t.ended_at for t in first)  # the slots ran at once
    for t in trials:
        assert len([r for r in store.runs(t.id) if r.outcome == "ok"]) == 2
    assert store.get_meta_json("verdict")["reason"]
    assert "node " in (out / "report.md").read_text()  # the report says which node measured what
    tokens = {t.launch_token for t in trials}
    for proc in psutil.process_iter():
        try:
            assert proc.environ().get(LAUNCH_TOKEN_ENV) not in tokens
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
