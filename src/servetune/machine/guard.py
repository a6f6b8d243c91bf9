"""Refuse to boot on a busy machine: a measurement there measures the other tenant too.

GPU: any compute process on the slot's GPUs, or memory in use that no listed process explains
(another container's process), before our server starts. Our own servers are stopped, and their
processes gone, before the next boot, so whatever holds the GPU then is someone else's.
CPU box (no GPU in the record): other processes taking more than `CPU_BUSY_SHARE` of the host's
cores. The test machine's own background (an editor, a shell, the test runner) is far below it;
a second study or a compile on the same cores is above it. `--allow-busy-gpu` boots anyway (the
record keeps who was there); the environment variable ALLOW_BUSY_ENV does the same for every
command, for a suite that runs two studies side by side on purpose.

A just-ended tenant may take a moment to leave (a server's memory freed after its exit), so a
busy reading is taken again for up to `settle_s` before the boot is refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from ..errors import ServetuneError
from .record import MachineRecord
from .snapshot import take

ALLOW_BUSY_ENV = "SERVETUNE_ALLOW_BUSY"
OPTION = "--allow-busy-gpu"
# Memory in use on an idle GPU is a few hundred MiB at most (driver and ECC reservations).
GPU_IDLE_MEMORY_MIB = 2048.0
GPU_IDLE_MEMORY_SHARE = 0.03
CPU_BUSY_SHARE = 0.5
SETTLE_S = 10.0
_RETRY_S = 2.0


class MachineBusy(ServetuneError):
    """The slot's GPUs or CPUs are in use by something else."""


def busy_reasons(record: MachineRecord) -> list[str]:
    """Who else uses the slot's machine, one phrase each; empty when it is free."""
    out: list[str] = []
    for gpu in record.gpus:
        where = f"GPU {gpu.index}" + (f" ({gpu.uuid})" if gpu.uuid else "")
        for p in gpu.processes:
            held = f" holding {p.used_mib:,.0f} MiB" if p.used_mib else ""
            out.append(f"{where}: process {p.pid}" + (f" ({p.name})" if p.name else "") + held)
        if not gpu.processes and gpu.memory_used_mib is not None:
            limit = max(GPU_IDLE_MEMORY_MIB, GPU_IDLE_MEMORY_SHARE * (gpu.memory_total_mib or 0.0))
            if gpu.memory_used_mib > limit:
                out.append(f"{where}: {gpu.memory_used_mib:,.0f} MiB in use by a process not visible here")
    if not record.gpus and record.cpu is not None and record.cpu.others_share is not None \
            and record.cpu.others_share > CPU_BUSY_SHARE:
        named = f" ({'; '.join(record.cpu.busiest)})" if record.cpu.busiest else ""
        cpu = record.cpu
        whose = f"the slot's {len(cpu.slot_cpus)} CPUs" if cpu.slot_cpus else f"the host's {cpu.cores} CPUs"
        out.append(f"other processes use {cpu.others_share:.0%} of {whose}{named}")
    return out


def refusal(reasons: list[str], where: str) -> str:
    return (f"{where}: the machine is busy: {'; '.join(reasons)}; "
            f"a measurement now would measure that tenant too ({OPTION} boots anyway)")


def checked_record(env: Mapping[str, str] | None, *, allow_busy: bool, where: str,
                   cpus: tuple[int, ...] | None = None, settle_s: float | None = None,
                   take_record: Callable[[Mapping[str, str] | None], MachineRecord] | None = None) -> MachineRecord:
    """The slot's machine record before a boot (its placement's `env` and `cpus`); MachineBusy
    (one line naming the tenant) when something else uses it and `allow_busy` is off. `where`
    names the trial or the command."""
    allow_busy = allow_busy or os.environ.get(ALLOW_BUSY_ENV, "").lower() in ("1", "true", "yes")
    take_record = take_record or (lambda e: take(e, cpus=cpus))
    record = take_record(env)
    deadline = time.monotonic() + (SETTLE_S if settle_s is None else settle_s)
    while not allow_busy and (reasons := busy_reasons(record)):
        if time.monotonic() >= deadline:
            raise MachineBusy(refusal(reasons, where))
        time.sleep(min(_RETRY_S, max(deadline - time.monotonic(), 0.0)))
        record = take_record(env)
    return record
