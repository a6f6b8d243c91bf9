"""Studies of stand-in servers (tests/fakes/standin_engine.py, real processes) on a local Ray
cluster (`servetune tune --ray ADDRESS`): two slots finish a study with every config and
replicate once; a slot's Ray worker killed mid-trial is replaced and the trial runs again
elsewhere with nothing counted twice; the driver SIGKILLed is resumed; Ctrl-C stops every
slot's server.

One cluster serves the module (Ray's start-up takes 10-20 s here). It runs with the module's
environment marker, which its workers and the servers they launch inherit, so what the tests
left behind is found by that marker alone, and the cluster is stopped by it at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from servetune.engine.ports import free_port
from tests.fakes import standin
from tests.faults.test_slots_faults import REPLICATES, SPACE, _both_slots_measuring, _rows
from tests.faults.test_standin_faults import STUDY_TIMEOUT_S, _wait_for

pytestmark = pytest.mark.slow

# The cluster declares GPUs it does not have (Ray's resources are logical): slots that ask for one
# each get distinct ids from Ray, as on a GPU host; the stand-in ignores them.
LOGICAL_GPUS = 2


@dataclass(frozen=True)
class Cluster:
    address: str
    mark: str  # carried by the cluster's processes, the tuners and every server they launch
    token: str  # the cluster's own authentication token (Ray's token auth), given to its tuners

    def args(self) -> list[str]:
        return ["--ray", self.address]

    def env(self) -> dict[str, str]:
        # A client of a cluster with token authentication says so (Ray does not guess it when connecting).
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with head_node(["--num-cpus", "3", "--num-gpus", str(LOGICAL_GPUS)]) as (started, _temp):
        yield started


@contextmanager
def head_node(resources: list[str]) -> Iterator[tuple[Cluster, Path]]:
    """A Ray head node on this host with `resources` (`ray start` flags), its processes marked; the
    cluster and its temp dir (where a second node joining it keeps its files). Everything of the
    cluster is killed at the end."""
    mark, token = standin.new_mark(), secrets.token_hex(32)
    temp = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))  # short: Ray's socket paths live under it
    port = free_port("127.0.0.1")
    started = Cluster(f"127.0.0.1:{port}", mark, token)
    try:
        ray_start(started, ["--head", "--port", str(port), "--include-dashboard", "false", *resources], temp)
        yield started, temp
    finally:
        _stop_cluster(mark)
        shutil.rmtree(temp, ignore_errors=True)


def ray_start(cluster: Cluster, args: list[str], temp: Path) -> None:
    """`ray start ARGS` on this host, marked and with the cluster's token."""
    ray_cli = Path(sys.executable).with_name("ray")
    started = subprocess.run(
        [str(ray_cli), "start", *args, "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp),
         "--disable-usage-stats"],
        env=standin.tuner_env(cluster.mark, cluster.env()), capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]


def _stop_cluster(mark: str) -> None:
    """Kill the cluster's processes: those with the marker and their descendants (Ray's agents
    rewrite their process title over their environment, so the marker alone misses them)."""
    found: dict[int, psutil.Process] = {}
    for proc in standin.marked_processes(mark):
        found[proc.pid] = proc
        try:
            found.update((child.pid, child) for child in proc.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    for proc in found.values():
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(found.values()), timeout=10)


def _servers(mark: str) -> list[psutil.Process]:
    """Live stand-in servers with the marker (the cluster's own processes carry it too)."""
    out = []
    for proc in standin.marked_processes(mark):
        try:
            if any("standin_engine.py" in part for part in proc.cmdline()):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _study(tmp_path: Path, trials: int = 4, gpus_per_trial: int = 0) -> tuple[Path, Path]:
    """A grid of `trials` candidates on 2 slots, runs slow enough (40 ms a chunk) to catch a slot busy."""
    spec = json.loads(standin.study_text("ray", space=SPACE, replicates=REPLICATES, trials=trials,
                                         args={"fault": "slow-chunks", "fault-delay-ms": 40}))
    spec["parallel"] = {"slots": 2, "gpus_per_trial": gpus_per_trial}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(json.dumps(spec))
    return study_file, tmp_path / "study"


def _assert_complete(db: Path, configs: int) -> list[Any]:
    """Every trial done and ok, each config once, every replicate of every trial measured once."""
    trials = _rows(db, "SELECT id, seq, role, slot, config_key, status, outcome, placement_json FROM trials ORDER BY seq")
    assert all(t["status"] == "done" and t["outcome"] == "ok" for t in trials), [tuple(t) for t in trials]
    candidates = [t["config_key"] for t in trials if t["role"] == "candidate"]
    assert len(candidates) == len(set(candidates)) == configs
    for trial in trials:
        ok = _rows(db, f"SELECT replicate FROM runs WHERE trial_id = {trial['id']} AND outcome = 'ok'")
        assert sorted(r[0] for r in ok) == list(range(1, REPLICATES + 1)), trial["seq"]
    return trials


def _nothing_left(cluster: Cluster, out: Path) -> None:
    assert [p.pid for p in _wait_gone(cluster.mark, 10)] == []
    assert standin.held_ports(out) == []


def _wait_gone(mark: str, timeout_s: float) -> list[psutil.Process]:
    try:
        _wait_for(lambda: not _servers(mark), timeout_s, "the servers to stop")
    except AssertionError:
        pass
    return _servers(mark)


def _measuring_trial(db: Path) -> Any:
    """A running trial with a recorded server, a stored run and the Ray worker it runs on."""
    rows = _rows(db, "SELECT t.seq, t.slot, t.server_pid, t.placement_json FROM trials t WHERE t.status = 'running'"
                     " AND t.server_pid IS NOT NULL AND EXISTS (SELECT 1 FROM runs r WHERE r.trial_id = t.id)")
    return rows[0] if rows else None


def test_two_ray_slots_finish_the_study_once_each_with_ray_placements(tmp_path: Path, cluster: Cluster) -> None:
    study_file, out = _study(tmp_path, trials=2)
    done = standin.run_tuner(study_file, out, cluster.mark, timeout_s=STUDY_TIMEOUT_S, extra_args=cluster.args(),
                           extra_env=cluster.env())
    assert done.returncode == 0, done.stderr[-3000:]
    trials = _assert_complete(out / "study.sqlite", configs=2)
    places = [json.loads(t["placement_json"]) for t in trials]
    assert all(p["ray_node_id"] and p["node"].startswith(f"{socket.gethostname()} (") for p in places)
    workers = {t["slot"]: p["worker_pid"] for t, p in zip(trials, places)}
    assert sorted(workers) == [0, 1] and len(set(workers.values())) == 2  # one actor per slot
    baselines = {t["slot"] for t in trials if t["role"] == "baseline"}
    assert baselines == {0, 1}  # each slot measured its own baseline
    _nothing_left(cluster, out)


def test_two_logical_gpu_slots_get_one_gpu_each_from_ray(tmp_path: Path, cluster: Cluster) -> None:
    study_file, out = _study(tmp_path, trials=2, gpus_per_trial=1)
    done = standin.run_tuner(study_file, out, cluster.mark, timeout_s=STUDY_TIMEOUT_S, extra_args=cluster.args(),
                             extra_env=cluster.env())
    assert done.returncode == 0, done.stderr[-3000:]
    trials = _assert_complete(out / "study.sqlite", configs=2)
    gpus = {t["slot"]: json.loads(t["placement_json"])["env"].get("CUDA_VISIBLE_DEVICES") for t in trials}
    # Each slot's servers were launched with the one GPU Ray gave its actor, and no two slots share one.
    assert sorted(gpus.values()) == [str(i) for i in range(LOGICAL_GPUS)], gpus
    _nothing_left(cluster, out)


def test_ray_worker_killed_mid_trial_reruns_it_on_another_slot(tmp_path: Path, cluster: Cluster) -> None:
    study_file, out = _study(tmp_path)
    db = out / "study.sqlite"
    tuner = standin.start_tuner(study_file, out, cluster.mark, extra_args=cluster.args(),
                                 extra_env=cluster.env(), log=tmp_path / "tuner.log")
    try:
        _wait_for(lambda: _measuring_trial(db) is not None, STUDY_TIMEOUT_S, "a trial measuring", tuner)
        victim = _measuring_trial(db)
        seen: dict[standin.RunKey, tuple[Any, ...]] = {}
        assert standin.store_problems(db, seen) == []
        os.kill(int(json.loads(victim["placement_json"])["worker_pid"]), signal.SIGKILL)
        assert tuner.wait(STUDY_TIMEOUT_S) == 0, (tmp_path / "tuner.log").read_text()[-3000:]
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    assert standin.store_problems(db, seen) == []  # nothing recorded before the kill was lost, changed or doubled
    _assert_complete(db, configs=len(SPACE["max-num-seqs"]))
    again = _rows(db, f"SELECT slot, placement_json FROM trials WHERE seq = {victim['seq']}")[0]
    assert again["slot"] != victim["slot"]  # ran again elsewhere: a surviving slot or the replacement
    assert json.loads(again["placement_json"])["worker_pid"] != json.loads(victim["placement_json"])["worker_pid"]
    boots = list((out / "logs").glob(f"trial{victim['seq']:03d}-*.log"))
    assert len(boots) == 2  # a new boot, not the lost one resumed
    assert not psutil.pid_exists(victim["server_pid"]) or psutil.Process(victim["server_pid"]).status() == "zombie"
    _nothing_left(cluster, out)


def _signal_when_both_measure(tmp_path: Path, cluster: Cluster, sig: int, wait_s: float) -> tuple[Path, Path, list[Any]]:
    """A study on the cluster whose tuner gets `sig` once both slots measure; its file, its
    directory, and the running trials' rows as they were just before the signal."""
    study_file, out = _study(tmp_path)
    db = out / "study.sqlite"
    tuner = standin.start_tuner(study_file, out, cluster.mark, extra_args=cluster.args(), extra_env=cluster.env())
    try:
        _wait_for(lambda: _both_slots_measuring(db), STUDY_TIMEOUT_S, "two slots measuring at once", tuner)
        running = _rows(db, "SELECT placement_json FROM trials WHERE status = 'running'")
        tuner.send_signal(sig)
        tuner.wait(wait_s)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    return study_file, out, running


def test_driver_sigkilled_on_ray_resumes_with_nothing_lost_or_twice(tmp_path: Path, cluster: Cluster) -> None:
    study_file, out, running = _signal_when_both_measure(tmp_path, cluster, signal.SIGKILL, 60)
    db = out / "study.sqlite"
    workers = [int(json.loads(r["placement_json"])["worker_pid"]) for r in running]
    seen: dict[standin.RunKey, tuple[Any, ...]] = {}
    assert standin.store_problems(db, seen) == []
    # The driver's job is gone, so Ray ends its actors: nothing of the dead tuner can measure on.
    _wait_for(lambda: not any(psutil.pid_exists(w) for w in workers), 60, "the dead driver's actors to end")
    before = len(seen)
    done = standin.run_tuner(study_file, out, cluster.mark, timeout_s=STUDY_TIMEOUT_S, extra_args=cluster.args(),
                           extra_env=cluster.env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert standin.store_problems(db, seen) == []  # no run lost, changed, duplicated or measured twice at once
    assert len(seen) > before
    trials = _assert_complete(db, configs=len(SPACE["max-num-seqs"]))
    # The resumed study's slots came up on the same node (and GPUs: none here), so they took their
    # indices back and their baselines hold: no slot measured a second one.
    assert {t["slot"] for t in trials} == {0, 1}
    assert sorted(t["slot"] for t in trials if t["role"] == "baseline") == [0, 1]
    _nothing_left(cluster, out)


def test_ctrl_c_on_ray_stops_every_slots_server(tmp_path: Path, cluster: Cluster) -> None:
    _, out, _ = _signal_when_both_measure(tmp_path, cluster, signal.SIGINT, 90)
    db = out / "study.sqlite"
    _nothing_left(cluster, out)
    # Both interrupted trials stay `running`, to be resumed: nothing was recorded as a failure.
    assert len(_rows(db, "SELECT id FROM trials WHERE status = 'running'")) == 2
    assert _rows(db, "SELECT id FROM trials WHERE outcome IS NOT NULL AND outcome != 'ok'") == []
