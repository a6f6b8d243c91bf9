"""Two slots of real vLLM CPU servers, each pinned to its own core, through `servetune tune`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import servetune
from tests.e2e.two_slots import check_two_slot_study

STUDY = Path(__file__).parent / "studies" / "slots.yaml"
pytestmark = pytest.mark.vllm


def test_two_cpu_slots_run_a_study_to_a_verdict(tmp_path: Path) -> None:
    out = tmp_path / "slots"
    done = servetune("tune", str(STUDY), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    check_two_slot_study(out)
    assert "| slot |" in (out / "report.md").read_text()
