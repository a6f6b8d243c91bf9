"""A study of stand-in servers on a Ray cluster of two nodes (two raylets on this host, each with its
own CPUs, as Ray's own multi-node tests make them): its slots spread over both nodes; the raylet
of the node a trial measures on is SIGKILLed, and the trial runs again on the surviving node with
every run stored before the kill kept and none measured twice; the server the dead node left
behind is stopped; the report's slot column names both nodes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from servetune.engine.ports import free_port
from tests.fakes import standin
from tests.faults.test_ray_faults import Cluster, _assert_complete, _nothing_left, _study, head_node, ray_start
from tests.faults.test_slots_faults import SPACE, _rows
from tests.faults.test_standin_faults import _wait_for

pytestmark = pytest.mark.slow

# Node death is noticed by Ray's health checks (seconds to tens of seconds), then the trial boots again.
STUDY_TIMEOUT_S = 300


def _raylets(mark: str) -> dict[str, psutil.Process]:
    """The cluster's raylets by Ray node id, oldest (the head's) first."""
    found = []
    for proc in standin.marked_processes(mark):
        try:
            args = proc.cmdline()
            if args and Path(args[0]).name == "raylet":
                node = next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
                found.append((proc.create_time(), node, proc))
        except (psutil.NoSuchProcess, psutil.AccessDenied, StopIteration):
            continue
    return {node: proc for _, node, proc in sorted(found, key=lambda f: f[0])}


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[tuple[Cluster, str, str]]:
    """The cluster, its head's node id and its second node's (each node 2 logical CPUs: a slot's
    actor takes 1, so the head alone can hold its own slot and the lost slot's replacement)."""
    with head_node(["--num-cpus", "2"]) as (cluster, temp):
        # A second raylet on this host: its own ports (the head holds the default agent port).
        ray_start(cluster, ["--address", cluster.address, "--num-cpus", "2",
                            "--dashboard-agent-listen-port", str(free_port("127.0.0.1"))], temp)
        head, second = list(_raylets(cluster.mark))
        yield cluster, head, second


def _node_dies(raylet: psutil.Process) -> None:
    """SIGKILL a node's raylet and, at once, the processes it started (its Ray workers and agents,
    which would exit a few seconds later by themselves: long enough for a slot to finish the trial
    it was on). What a slot's worker launched runs in a session of its own and lives on, as it
    does on a host whose raylet crashed."""
    doomed = [raylet, *raylet.children()]
    for proc in doomed:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(doomed, timeout=10)


def _done_on(db: Path, node: str) -> bool:
    rows = _rows(db, "SELECT placement_json FROM trials WHERE status = 'done'")
    return any(json.loads(r["placement_json"])["ray_node_id"] == node for r in rows)


def _measuring_on(db: Path, node: str) -> Any:
    """A running trial on `node` with a recorded server and a stored run."""
    rows = _rows(db, "SELECT t.seq, t.slot, t.server_pid, t.placement_json FROM trials t WHERE t.status = 'running'"
                     " AND t.server_pid IS NOT NULL AND EXISTS (SELECT 1 FROM runs r WHERE r.trial_id = t.id)")
    return next((r for r in rows if json.loads(r["placement_json"])["ray_node_id"] == node), None)


def test_a_node_killed_mid_trial_reruns_it_on_the_other_node_and_the_report_names_both(
        tmp_path: Path, two_nodes: tuple[Cluster, str, str]) -> None:
    cluster, head, second = two_nodes
    study_file, out = _study(tmp_path)
    db = out / "study.sqlite"
    tuner = standin.start_tuner(study_file, out, cluster.mark, extra_args=cluster.args(),
                                extra_env={**cluster.env(), "COLUMNS": "1000"},  # a note on one line
                                log=tmp_path / "tuner.log", report=True)
    try:
        # The slots spread over both nodes: the second node finished a trial and measures another.
        _wait_for(lambda: _done_on(db, second) and _measuring_on(db, second) is not None, STUDY_TIMEOUT_S,
                  "a trial done on node 2 and another measuring there", tuner)
        victim = _measuring_on(db, second)
        seen: dict[standin.RunKey, tuple[Any, ...]] = {}
        assert standin.store_problems(db, seen) == []
        _node_dies(_raylets(cluster.mark)[second])
        assert tuner.wait(STUDY_TIMEOUT_S) == 0, (tmp_path / "tuner.log").read_text()[-3000:]
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    assert standin.store_problems(db, seen) == []  # nothing stored before the kill lost, changed or doubled
    trials = _assert_complete(db, configs=len(SPACE["max-num-seqs"]))  # each config and replicate once
    nodes = {t["seq"]: json.loads(t["placement_json"])["ray_node_id"] for t in trials}
    assert nodes[victim["seq"]] == head  # measured again on the surviving node
    assert set(nodes.values()) == {head, second}  # trials finished on each node
    assert len(list((out / "logs").glob(f"trial{victim['seq']:03d}-*.log"))) == 2  # a new boot
    # A replacement slot joined on the surviving node (not on the dying one, which Ray still counted alive).
    log = (tmp_path / "tuner.log").read_text()
    assert re.search(rf"Ray node {head[:8]}[^)]*\) replaces slot {victim['slot']} ", log), log[-3000:]
    # The server the dead node's slot had started was stopped (the host lives on), and nothing else is left.
    assert not psutil.pid_exists(victim["server_pid"]) or psutil.Process(victim["server_pid"]).status() == "zombie"
    _nothing_left(cluster, out)
    report = (out / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith(("| ", "|")) and "Ray node" in line]
    for node in (head, second):
        assert any(f"Ray node {node[:8]}" in line for line in rows), (node, rows)
