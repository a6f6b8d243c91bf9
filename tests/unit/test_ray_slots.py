"""The parts of the Ray slots that need no cluster: the GPUs a slot asks for, which names a slot's
call may reach on the driver, where a placement says it ran, and `--ray` without Ray installed.
The slots themselves run on a local cluster in tests/faults/test_ray_faults.py."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servetune.cli import app
from servetune.engine.placement import Placement
from servetune.errors import ServetuneError
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune.ray_slots import RaySlots, _share_cpus, nodes_of_host, slot_gpus
from servetune.tune.slots import Driver, SlotCalls, SlotStopped, resolve_call


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
                      where={"node": "gpu7 (10.0.0.7)", "ray_node_id": "3f2a1b9c77", "worker_pid": "41"})
    # The Ray node's id tells apart raylets that share a host (same name and address).
    assert place.label() == "slot 1 (node gpu7 (10.0.0.7), Ray node 3f2a1b9c; CUDA_VISIBLE_DEVICES=2,3)"
    assert place.describe() == {"slot": 1, "env": {"CUDA_VISIBLE_DEVICES": "2,3"}, "cpus": None,
                                "node": "gpu7 (10.0.0.7)", "ray_node_id": "3f2a1b9c77", "worker_pid": "41"}
    assert Placement.from_described(place.describe()) == place  # as the report reads it back from the store
    assert Placement(0, cpus=(0, 1)).node_label() == ""  # the tuner's own host


def _node(node_id: str, ip: str, alive: bool = True) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerAddress": ip, "Alive": alive}


def test_a_trials_leftovers_are_sought_on_a_live_node_of_the_host_it_ran_on() -> None:
    ran = {"ray_node_id": "dead", "node_ip": "10.0.0.2"}
    nodes = [_node("head", "10.0.0.1"), _node("dead", "10.0.0.2", alive=False), _node("twin", "10.0.0.2"),
             _node("other", "10.0.0.3")]
    # Its node's raylet died: another raylet of that host reaches the server it left running.
    assert nodes_of_host(ran, nodes, own="head") == ["twin"]
    # The driver's own node first when it shares the host, the node it ran on last (it may be dying unnoticed).
    alive_again = [_node("dead", "10.0.0.2"), _node("head", "10.0.0.2"), _node("twin", "10.0.0.2")]
    assert nodes_of_host(ran, alive_again, own="head") == ["head", "twin", "dead"]
    # A store from before node_ip: the address from Ray's table while it lists the node; else that node alone.
    assert nodes_of_host({"ray_node_id": "dead"}, nodes, own="head") == ["twin"]
    assert nodes_of_host({"ray_node_id": "gone"}, nodes, own="head") == []
    assert nodes_of_host({"ray_node_id": "other"}, nodes, own="head") == ["other"]


class _Replies:
    """A mailbox's `reply.remote` as the driver's side sees it."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bool, Any]] = []
        self.reply = self
        self.remote = lambda number, ok, value: self.sent.append((number, ok, value))


def test_a_lost_slot_still_running_gets_no_call_of_its_trial_through(tmp_path: Path) -> None:
    slots = object.__new__(RaySlots)  # the driver's side of the mailbox alone: no cluster
    slots._lock, slots._store, slots.driver = threading.Lock(), StudyStore.in_dir(tmp_path), Driver()
    slots._mailbox = replies = _Replies()
    calls = SlotCalls(enough=lambda t, r: True, progress=lambda *a: None, fits_of=lambda t, e: None)
    slots._calls = {7: (2, calls)}  # trial 7 now runs on slot 2: slot 0 was given up as lost
    slots._deliver(1, 0, 7, "enough", (None, 1), {})
    slots._deliver(None, 0, 7, "progress", (None, 1), {})
    assert [(n, ok, type(v)) for n, ok, v in replies.sent] == [(1, False, SlotStopped)]
    assert slots.driver._inbox.empty()  # nothing of the lost slot reached the driver
    slots._deliver(2, 2, 7, "enough", (None, 1), {})  # the trial's own slot is heard
    assert slots.driver._inbox.qsize() == 1 and len(replies.sent) == 1


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

    a, b, c = _share_cpus([at("n1"), at("n1"), at("n2")], gpus=0, bind_env=("VLLM_CPU_OMP_THREADS_BIND",))
    assert (a.cpus, b.cpus, c.cpus) == ((0, 1), (2, 3), None)
    assert a.env == {"VLLM_CPU_OMP_THREADS_BIND": "0,1"} and c.env == {}
    gpu = _share_cpus([at("n1", {"CUDA_VISIBLE_DEVICES": "0"}), at("n1", {"CUDA_VISIBLE_DEVICES": "1"})], gpus=1)
    assert [p.cpus for p in gpu] == [None, None] and gpu[1].env == {"CUDA_VISIBLE_DEVICES": "1"}
