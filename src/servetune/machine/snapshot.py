"""Take the record of a slot's machine: NVML, else nvidia-smi, and the CPU through psutil."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

import psutil

from . import cpu, nvml, smi
from .record import MachineRecord


def slot_gpus(env: Mapping[str, str] | None) -> list[str] | None:
    """The GPUs a slot's servers see: its placement's CUDA_VISIBLE_DEVICES, else this process's,
    else None (all of the host's). A mask that names none ("" or "-1") is an empty list."""
    mask = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if mask is None:
        return None
    return [x.strip() for x in mask.split(",") if x.strip() and x.strip() != "-1"]


def process_name(pid: int) -> str | None:
    """A process's name where this host's process table has it (another container's pid: None)."""
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None


def take(env: Mapping[str, str] | None = None, *, cpus: tuple[int, ...] | None = None,
         cpu_window_s: float = 0.25) -> MachineRecord:
    """The record of the machine a slot (its placement's `env` and `cpus`) boots on. The CPU part
    measures other processes' share over `cpu_window_s` (0: not measured)."""
    ids = slot_gpus(env)
    cpu_state = cpu.state(cpu_window_s, cpus)
    now = time.time()
    if ids == []:
        return MachineRecord(source="psutil", taken_at=now, cpu=cpu_state)
    for source, reader in (("nvml", nvml.read), ("nvidia-smi", smi.read)):
        found = reader(ids, process_name)
        if found is not None and found[2]:
            driver, cuda, gpus = found
            return MachineRecord(source=source, taken_at=now, driver=driver, cuda=cuda, gpus=tuple(gpus),
                                 cpu=cpu_state)
    return MachineRecord(source="psutil", taken_at=now, cpu=cpu_state)
