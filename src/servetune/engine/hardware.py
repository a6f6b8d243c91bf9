"""The accelerators this host has, for `servetune init`: GPUs by nvidia-smi, else by torch, else the CPU.

nvidia-smi is asked first because it answers without importing a CUDA library (seconds, no
GPU memory taken); torch stands in where the driver tools are missing (a container with the
runtime only). Neither found means the CPU build of the engine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

_NVIDIA_SMI_TIMEOUT_S = 20.0
# Chips whose GPU shares one memory with the CPU (and the OS): its "memory.total" is the host's.
_UNIFIED = ("GB10", "GH200", "Orin", "Thor")
# Memory in use before any server of ours (a display, another job) beyond this is a shared GPU.
SHARED_ABOVE_GIB = 1.0
_QUERY = "name,memory.total,compute_cap,memory.used"


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float
    compute_capability: tuple[int, int] | None  # None: not reported (an old driver)
    used_gib: float | None = None  # in use when asked (other processes, a display); None: not reported

    @property
    def unified_memory(self) -> bool:
        return any(chip.lower() in self.name.lower() for chip in _UNIFIED)


@dataclass(frozen=True)
class Hardware:
    gpus: tuple[Gpu, ...]
    cpus: int
    source: str  # how it was found, for the written file's comment

    @property
    def is_gpu(self) -> bool:
        return bool(self.gpus)

    @property
    def gpu_memory_gib(self) -> float:
        """The smallest GPU's memory: what every slot can count on."""
        return min(g.memory_gib for g in self.gpus) if self.gpus else 0.0

    @property
    def shared(self) -> bool:
        """Something else holds memory on a GPU now: a larger share for the server takes it from them."""
        return any(g.used_gib is not None and g.used_gib > SHARED_ABOVE_GIB for g in self.gpus)

    @property
    def unified_memory(self) -> bool:
        return any(g.unified_memory for g in self.gpus)

    def describe(self) -> str:
        if not self.gpus:
            return f"no GPU found ({self.source}): CPU, {self.cpus} cores"
        names = sorted({g.name for g in self.gpus})
        return f"{len(self.gpus)} x {', '.join(names)} ({self.gpu_memory_gib:.0f} GiB each; {self.source})"


def detect() -> Hardware:
    """GPUs through nvidia-smi, else torch; with neither, the CPU."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gpus = visible(_from_nvidia_smi(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if gpus:
        return Hardware(gpus, cpus, "nvidia-smi")
    gpus = _from_torch()
    if gpus:
        return Hardware(gpus, cpus, "torch.cuda")
    return Hardware((), cpus, "no nvidia-smi, torch sees no CUDA device")


def visible(gpus: tuple[Gpu, ...], mask: str | None) -> tuple[Gpu, ...]:
    """The GPUs `CUDA_VISIBLE_DEVICES` leaves a server (nvidia-smi lists them all); indices only,
    a mask of UUIDs or names is taken as all of them."""
    if mask is None:
        return gpus
    items = [m.strip() for m in mask.split(",") if m.strip()]
    if not all(m.isdigit() for m in items):
        return gpus
    return tuple(gpus[int(m)] for m in items if int(m) < len(gpus))


def parse_nvidia_smi(text: str, host_memory_gib: float | None = None) -> tuple[Gpu, ...]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total,compute_cap,memory.used --format=csv,noheader,
    nounits` (the last two optional). A unified-memory chip (GB10) reports no memory of its own
    ("[N/A]"): `host_memory_gib` stands in, the memory it shares with the host."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        memory_gib = _mib_as_gib(parts[1])
        if memory_gib is None and any(chip.lower() in parts[0].lower() for chip in _UNIFIED):
            memory_gib = host_memory_gib
        if memory_gib is None:
            continue
        cap = None
        if len(parts) > 2 and "." in parts[2]:
            major, _, minor = parts[2].partition(".")
            if major.isdigit() and minor.isdigit():
                cap = (int(major), int(minor))
        used = _mib_as_gib(parts[3]) if len(parts) > 3 else None
        gpus.append(Gpu(parts[0], memory_gib, cap, used))
    return tuple(gpus)


def _mib_as_gib(text: str) -> float | None:
    try:
        return float(text) / 1024
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _from_nvidia_smi() -> tuple[Gpu, ...]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        done = subprocess.run([exe, f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_nvidia_smi(done.stdout, _host_memory_gib()) if done.returncode == 0 else ()


def _host_memory_gib() -> float | None:
    import psutil

    return float(psutil.virtual_memory().total) / 2**30


def _from_torch() -> tuple[Gpu, ...]:
    try:
        import torch
    except ImportError:
        return ()
    try:
        if not torch.cuda.is_available():
            return ()
        return tuple(Gpu(torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory / 2**30,
                         tuple(torch.cuda.get_device_capability(i)),  # type: ignore[arg-type]
                         _torch_used_gib(torch, i))
                     for i in range(torch.cuda.device_count()))
    except Exception:  # a broken CUDA install: count it as none, the CPU path still works
        return ()


def _torch_used_gib(torch: Any, index: int) -> float | None:
    """Memory in use on the device by anyone (free/total from the driver), None where not answered."""
    try:
        free, total = torch.cuda.mem_get_info(index)
    except Exception:  # an older torch, a driver that will not say
        return None
    return float(total - free) / 2**30
