"""Pinning the EngineCore beside its workers, on a stand-in process group named like vLLM's."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servetune.engine.cpu_layout import client_cores, pin_engine_core
from servetune.engine.launch import Server, group_members, launch, terminate

CPUS = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="needs two cores to pin apart")

# A leader (the "API server") with an EngineCore child and a Worker child; each child renames
# itself the way vLLM's setproctitle does, the worker binds itself like vLLM's OpenMP setup.
_GROUP = """
import os, subprocess, sys, time
child = '''
import os, sys, time
open("/proc/self/comm", "w").write(sys.argv[1])
if sys.argv[2]:
    os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
time.sleep(600)
'''
worker_cpus = sys.argv[1]
subprocess.Popen([sys.executable, "-c", child, "VLLM::EngineCore", ""])
subprocess.Popen([sys.executable, "-c", child, "VLLM::Worker_TP0", worker_cpus])
time.sleep(600)
"""


def _names(pgid: int) -> dict[int, str]:
    """pid -> name (as the kernel keeps it: 15 characters) of the group's live processes."""
    return {p.pid: p.name() for p in group_members(pgid)}


def _start_group(tmp_path: Path, worker_cpus: list[int]) -> Server:
    argv = [sys.executable, "-c", _GROUP, ",".join(map(str, worker_cpus))]
    server = launch(argv, dict(os.environ), tmp_path / "group.log", port=1)
    names: set[str] = set()
    for _ in range(100):  # until both children have renamed themselves
        names = set(_names(server.pgid).values())
        if {"VLLM::EngineCor", "VLLM::Worker_TP"} <= names:
            return server
        time.sleep(0.1)
    terminate(server, grace_s=2, port_wait_s=0)
    raise AssertionError(f"stand-in group did not come up: {names}")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Server]:
    server = _start_group(tmp_path, CPUS[:1])
    yield server
    terminate(server, grace_s=2, port_wait_s=0)


def test_engine_core_joins_the_workers_and_the_api_server_gets_the_rest(group: Server) -> None:
    layout = pin_engine_core(group.pgid, group.pid)
    assert layout.detail.startswith("pinned"), layout.detail
    engine_pid = next(pid for pid, name in _names(group.pgid).items() if name == "VLLM::EngineCor")
    assert os.sched_getaffinity(engine_pid) == set(CPUS[:1])
    assert os.sched_getaffinity(group.pid) == set(CPUS[1:])
    assert layout.client_cpus == frozenset(CPUS[1:])  # the load client goes beside the API server


def test_the_client_thread_runs_on_the_given_cores_and_then_as_before() -> None:
    before = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def measure() -> None:
        with client_cores(frozenset(CPUS[1:])):
            seen.append(os.sched_getaffinity(0))
            started = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
            started.start()
            started.join()
        seen.append(os.sched_getaffinity(0))

    worker = threading.Thread(target=measure)
    worker.start()
    worker.join()
    assert seen == [set(CPUS[1:]), set(CPUS[1:]), before]
    assert os.sched_getaffinity(0) == before  # another thread's affinity is its own
    with client_cores(None):
        assert os.sched_getaffinity(0) == before


def test_nothing_is_pinned_when_the_workers_hold_every_core(tmp_path: Path) -> None:
    server = _start_group(tmp_path, CPUS)
    try:
        layout = pin_engine_core(server.pgid, server.pid)
        assert layout.client_cpus is None and layout.detail.startswith("not pinned") and "none are left over" in layout.detail
        assert os.sched_getaffinity(server.pid) == set(CPUS)
    finally:
        terminate(server, grace_s=2, port_wait_s=0)


def test_a_group_without_vllm_processes_is_left_alone(tmp_path: Path) -> None:
    server = launch([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ),
                    tmp_path / "plain.log", port=1)
    try:
        layout = pin_engine_core(server.pgid, server.pid)
        assert layout.client_cpus is None and layout.detail.startswith("not pinned: expected one EngineCore")
        assert os.sched_getaffinity(server.pid) == set(CPUS)
    finally:
        terminate(server, grace_s=2, port_wait_s=0)
