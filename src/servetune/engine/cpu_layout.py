"""The CPU build of vLLM on a few cores: keep the EngineCore off the API server's cores.

vLLM's CPU build binds the worker's OpenMP threads to some cores and leaves the rest ("reserved
CPUs") to everything else. The EngineCore process runs unpinned and busy-waits on the worker
for most of each step; on a 2-core host it lands beside the API server and starves it for up to
~100 ms at a time, so a whole response reaches the client in one burst at the end (measured:
TTFT jumping between 12 and 95 ms at concurrency 1, by the same client, from one run to the
next). Moving the EngineCore onto the worker's cores and the API server onto the reserved ones
makes streaming smooth and runs repeatable (TTFT 13.6-14.4 ms over the same runs).

The load client belongs beside the API server too: on the worker's core it takes turns with the
busy worker. Measured on a 2-core host, one pinned server, bench runs of 96 requests from a client
pinned to the worker's core, to the API server's, or unpinned, three rounds: 702/952/887,
932/1091/1248 and 1038/929/1076 output tok/s. `client_cores` moves the measuring thread there.

Only processes of the server's own process group (which servetune started) are touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil

from .launch import group_members

ENGINE_CORE_NAME = "VLLM::EngineCor"  # setproctitle names, cut to 15 characters by the kernel
WORKER_PREFIX = "VLLM::Worker"


def _set_all_threads(proc: psutil.Process, cpus: set[int]) -> None:
    for thread in proc.threads():
        try:
            os.sched_setaffinity(thread.id, cpus)
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile


@dataclass(frozen=True)
class CoreLayout:
    detail: str                                  # what was done, or why nothing was
    client_cpus: frozenset[int] | None = None    # where the load client belongs (None: anywhere)


def pin_engine_core(pgid: int, leader_pid: int) -> CoreLayout:
    """Pin the EngineCore of the server group `pgid` to its worker's cores and the API server
    (`leader_pid`) to the other cores. Never raises for a process that ends meanwhile (the
    engine's start must not)."""
    try:
        return _pin(pgid, leader_pid)
    except psutil.NoSuchProcess:
        return CoreLayout("not pinned: a server process ended while looking")


@contextmanager
def client_cores(cpus: frozenset[int] | None) -> Iterator[None]:
    """Run the calling thread (and the threads it starts) on `cpus`, then as before. Affinity is
    per thread on Linux, so a study's other slots keep theirs."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _pin(pgid: int, leader_pid: int) -> CoreLayout:
    procs = {p.pid: p for p in group_members(pgid)}
    names = {pid: p.name() for pid, p in procs.items()}
    engine = [procs[pid] for pid, name in names.items() if name.startswith(ENGINE_CORE_NAME)]
    workers = [procs[pid] for pid, name in names.items() if name.startswith(WORKER_PREFIX)]
    if len(engine) != 1 or not workers or leader_pid not in procs:
        return CoreLayout(f"not pinned: expected one EngineCore and its workers, found {sorted(set(names.values()))}")
    worker_cpus: set[int] = set()
    for worker in workers:
        worker_cpus |= set(worker.cpu_affinity())
    allowed = set(os.sched_getaffinity(leader_pid))
    others = allowed - worker_cpus
    if not worker_cpus or not others:
        return CoreLayout(f"not pinned: the workers use cores {sorted(worker_cpus)} of {sorted(allowed)}, "
                          "none are left over")
    _set_all_threads(engine[0], worker_cpus)
    _set_all_threads(procs[leader_pid], others)
    return CoreLayout(f"pinned EngineCore (pid {engine[0].pid}) to the workers' cores {sorted(worker_cpus)}, "
                      f"API server (pid {leader_pid}) to {sorted(others)}",
                      client_cpus=frozenset(others))
