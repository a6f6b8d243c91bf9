"""The parts of the Ray slots that need no cluster: the GPUs a slot asks for, which names a slot's
call may reach on the driver, where a placement says it ran, and `--ray` without Ray installed.
The slots themselves run on a local cluster in tests/faults/test_ray_faults.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servetune.cli import app
from servetune.engine.placement import Placement
from servetune.errors import ServetuneError
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune.ray_slots import _share_cpus, slot_gpus
from servetune.tune.slots import SlotCalls, resolve_call


def _spec(args: dict[str, Any], space: dict[str, Any], gpus_per_trial: int = 0) -> StudySpec:
    return StudySpec.model_validate({
        "name": "ray", "engine": {"model": "m", "args": args}, "space": space,
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 8, "num_prompts": 2, "concurrency": 1}],
        "parallel": {"slots": 2, "gpus_per_trial": gpus_per_trial},
    })


def test_a_slot_asks_for_the_gpus_of_the_largest_server_of_the_study() -> None:
    assert slot_gpus(_spec({}, {"max-num-seqs": [8, 16]})) == 0  # a CPU study asks for none
    assert slot_gpus(_spec({}, {"max-num-seqs": [8, 16]}, gpus_per_trial=1)) == 1
    assert slot_gpus(_spec({"tensor-parallel-size": 2}, {})) == 2
    # the largest tensor x pipeline parallel product the space can produce
    assert slot_gpus(_spec({"pipeline-parallel-size": 2}, {"tensor-parallel-size": [1, 2, 4]})) == 8
    assert slot_gpus(_spec({"tensor-parallel-size": 2}, {}, gpus_per_trial=4)) == 4  # gpus_per_trial when larger


def test_a_slot_call_reaches_only_the_trials_calls_and_public_store_methods(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    calls = SlotCalls(enough=lambda t, r: True, progress=lambda *a: None, fits_of=lambda t, e: None)
    assert resolve_call(calls, store, "enough")(None, 1) is True
    assert resolve_call(calls, store, "store.runs") == store.runs
    for name in ("store._conn", "store._write", "_calls", "__class__", "duplicate_of", "store.path", "nothing"):
        with pytest.raises(ValueError, match="no such call"):
            resolve_call(calls, store, name)


def test_a_ray_placement_names_its_node_in_the_label_and_the_store() -> None:
    place = Placement(1, {"CUDA_VISIBLE_DEVICES": "2,3"},
                      where={"node": "gpu7 (10.0.0.7)", "ray_node_id": "abc", "worker_pid": "41"})
    assert place.label() == "slot 1 (node gpu7 (10.0.0.7); CUDA_VISIBLE_DEVICES=2,3)"
    assert place.describe() == {"slot": 1, "env": {"CUDA_VISIBLE_DEVICES": "2,3"}, "cpus": None,
                                "node": "gpu7 (10.0.0.7)", "ray_node_id": "abc", "worker_pid": "41"}
    assert Placement.from_described(place.describe()) == place and place.node == "gpu7 (10.0.0.7)"


def test_ray_flag_without_ray_installed_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(json.dumps(_spec({}, {"max-num-seqs": [8]}).model_dump(mode="json")))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as it does where Ray is not installed
    monkeypatch.delitem(sys.modules, "servetune.tune.ray_slots")
    result = CliRunner().invoke(app, ["tune", str(study), "--out", str(tmp_path / "out"), "--ray", "auto"])
    assert isinstance(result.exception, ServetuneError)
    assert str(result.exception) == "--ray: Ray is not installed here; install servetune[ray] (pip install 'servetune[ray]')"
    assert not (tmp_path / "out" / "study.sqlite").exists()  # nothing was started


def test_cpu_slots_on_one_node_split_its_cores_gpu_slots_and_lone_slots_are_not_pinned() -> None:
    def at(node: str, env: dict[str, str] | None = None) -> Placement:
        return Placement(-1, env or {}, cpus=(0, 1, 2, 3), where={"node": node})

    a, b, c = _share_cpus([at("n1"), at("n1"), at("n2")], gpus=0)
    assert (a.cpus, b.cpus, c.cpus) == ((0, 1), (2, 3), None)
    assert a.env == {"VLLM_CPU_OMP_THREADS_BIND": "0,1"} and c.env == {}
    gpu = _share_cpus([at("n1", {"CUDA_VISIBLE_DEVICES": "0"}), at("n1", {"CUDA_VISIBLE_DEVICES": "1"})], gpus=1)
    assert [p.cpus for p in gpu] == [None, None] and gpu[1].env == {"CUDA_VISIBLE_DEVICES": "1"}
