"""Two slots of stand-in servers (tests/fakes/standin_engine.py, real processes) as actors of a
local Ray cluster that `servetune tune --ray auto` starts for the study: the study reaches its
verdict as the thread slots do (tests/e2e/test_slots_vllm.py, on real vLLM), every trial placed
by Ray on this node, and nothing is left afterwards.

The subject is Ray's placement and the slots' bookkeeping, not the engine, so stand-ins serve:
a real vLLM boot a trial would cost about a minute each here."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.e2e.two_slots import check_two_slot_study
from tests.fakes import standin
from tests.faults.test_standin_faults import STUDY_TIMEOUT_S

pytestmark = pytest.mark.slow


def test_two_ray_slots_run_a_study_to_a_verdict(tmp_path: Path, marks: list[str]) -> None:
    # tests/e2e/studies/slots.yaml's grid on the stand-in; 100 ms a chunk keeps each slot's
    # baseline running for seconds, so the two slots' baselines overlap whatever Ray's start-up skew.
    spec = json.loads(standin.study_text("ray-auto", space={"max-num-seqs": [2, 16]}, replicates=2, trials=2,
                                         args={"fault": "slow-chunks", "fault-delay-ms": 100}))
    spec["parallel"] = {"slots": 2}
    study_file, out = tmp_path / "study.yaml", tmp_path / "ray-slots"
    study_file.write_text(json.dumps(spec))
    mark = standin.new_mark()
    marks.append(mark)
    done = standin.run_tuner(study_file, out, mark, timeout_s=STUDY_TIMEOUT_S, report=True,
                             extra_args=["--ray", "auto"])
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    trials = check_two_slot_study(out)
    for slot in (0, 1):  # each Ray slot's first trial was placed by Ray on this node
        first = next(t for t in trials if t.slot == slot)
        assert first.placement is not None and (first.placement.node or "").startswith(f"{socket.gethostname()} (")
        assert first.placement.where["ray_node_id"]
    assert "node " in (out / "report.md").read_text()  # the report says which node measured what
