"""The host's CPU through psutil: model, frequency, load, and how much of it other processes take.

"Other processes" are everything but this process and its descendants (the tuner, its client
processes and the servers it started): what competes with a measurement for the cores.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from .record import CpuState


def model_name() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def own_pids() -> set[int]:
    """This process and its descendants."""
    me = psutil.Process()
    try:
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def _busy_s(times: psutil._common.scputimes) -> float:  # type: ignore[name-defined]
    return float(times.user + times.system + getattr(times, "nice", 0.0) + getattr(times, "irq", 0.0)
                 + getattr(times, "softirq", 0.0) + getattr(times, "steal", 0.0))


def _process_cpu_s() -> dict[int, tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info.get("cpu_times")
        if times is not None:
            out[p.pid] = (p.info.get("name") or "?", float(times.user + times.system))
    return out


def cores_of(cpus: tuple[int, ...] | None) -> int:
    return len(cpus) if cpus else psutil.cpu_count() or 1


def system_busy_s(cpus: tuple[int, ...] | None) -> float:
    """Busy CPU seconds since boot: of the whole host, or of `cpus`."""
    if not cpus:
        return _busy_s(psutil.cpu_times())
    per_cpu = psutil.cpu_times(percpu=True)
    return sum(_busy_s(per_cpu[i]) for i in cpus if i < len(per_cpu))


def own_cpu_s() -> float:
    """CPU seconds of this process and its live descendants, each with the children it reaped:
    a descendant that exits is counted in its parent's children times from then on."""
    me = psutil.Process()
    try:
        tree = [me, *me.children(recursive=True)]
    except psutil.Error:
        tree = [me]
    total = 0.0
    for p in tree:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


class CpuWindow:
    """Other processes' share of the CPU between `__init__` and `close()`: the system's busy time
    less this process tree's, over wall time x cores; with `name_others`, the heaviest others are
    named (a scan of every process at both ends: for the record before a boot, not a long run).

    A slot with CPUs of its own (`cpus`: a share of the host, engine/placement.py) is busy when
    those CPUs are: their busy time over wall time x their number. The slots beside it, whose
    servers may not be this process's children (Ray actors), run on other CPUs and do not count."""

    def __init__(self, cpus: tuple[int, ...] | None = None, *, name_others: bool = True) -> None:
        self.cpus = cpus
        self.cores = cores_of(cpus)
        self._t0 = time.monotonic()
        self._sys0 = system_busy_s(self.cpus)
        self._own0 = 0.0 if cpus else own_cpu_s()
        self._procs0 = _process_cpu_s() if name_others else None

    def close(self, top: int = 3) -> tuple[float | None, tuple[str, ...]]:
        wall = time.monotonic() - self._t0
        if wall <= 0:
            return None, ()
        own_s = 0.0 if self.cpus else own_cpu_s() - self._own0
        system_s = system_busy_s(self.cpus) - self._sys0
        share = min(max((system_s - own_s) / (wall * self.cores), 0.0), 1.0)
        if self._procs0 is None:
            return share, ()
        before, own = self._procs0, own_pids()
        others = sorted(((s - before[pid][1], name, pid) for pid, (name, s) in _process_cpu_s().items()
                         if pid not in own and pid in before), reverse=True)
        busiest = tuple(f"{name} (pid {pid}): {used / wall:.0%} of a core"
                        for used, name, pid in others[:top] if used / wall >= 0.05)
        return share, busiest


class BusyMeter:
    """The CPU's (or the slot's CPUs') busy share since the last reading: one read of /proc/stat,
    cheap enough for every sample of a run."""

    def __init__(self, cpus: tuple[int, ...] | None = None) -> None:
        self.cpus, self.cores = cpus, cores_of(cpus)
        self._t, self._busy = time.monotonic(), system_busy_s(cpus)

    def read(self) -> float | None:
        t, busy = time.monotonic(), system_busy_s(self.cpus)
        wall, used = t - self._t, busy - self._busy
        self._t, self._busy = t, busy
        return None if wall <= 0 else min(max(used / (wall * self.cores), 0.0), 1.0)


def state(window_s: float = 0.5, cpus: tuple[int, ...] | None = None) -> CpuState:
    """The CPU now; `window_s` > 0 also measures other processes' share over that long (of the
    slot's `cpus` where it has its own)."""
    window = CpuWindow(cpus) if window_s > 0 else None
    if window is not None:
        time.sleep(window_s)
    share, busiest = window.close() if window is not None else (None, ())
    freq = _freq()
    return CpuState(model=model_name(), cores=psutil.cpu_count() or 1, slot_cpus=cpus,
                    freq_mhz=None if freq is None else freq.current,
                    freq_max_mhz=None if freq is None or not freq.max else freq.max,
                    load_avg=load_avg(), others_share=share, busiest=busiest)


def _freq() -> psutil._common.scpufreq | None:  # type: ignore[name-defined]
    try:
        return psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return None


def freq_mhz() -> float | None:
    freq = _freq()
    return None if freq is None else float(freq.current)


def load_avg() -> tuple[float, float, float] | None:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return None
    return (one, five, fifteen)
