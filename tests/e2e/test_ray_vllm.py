"""Two slots of real vLLM CPU servers as actors of a local Ray cluster (`servetune tune --ray auto`
starts one for the study): the study of tests/e2e/studies/slots.yaml reaches its verdict as the
thread slots do, every trial placed by Ray on this node, and nothing is left afterwards."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import servetune
from tests.e2e.two_slots import check_two_slot_study

STUDY = Path(__file__).parent / "studies" / "slots.yaml"
pytestmark = pytest.mark.vllm


def test_two_ray_slots_of_real_vllm_run_a_study_to_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "ray-slots"
    done = servetune("tune", str(STUDY), "--out", str(out), "--ray", "auto")
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    trials = check_two_slot_study(out)
    for slot in (0, 1):  # each Ray slot's first trial was placed by Ray on this node
        first = next(t for t in trials if t.slot == slot)
        assert first.placement["node"].startswith(f"{socket.gethostname()} (") and first.placement["ray_node_id"]
    assert "node " in (out / "report.md").read_text()  # the report says which node measured what
