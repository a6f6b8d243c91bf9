"""The machine through a measured run: a background thread reads the slot's GPUs (power, SM and
memory utilisation, clocks, clock event reasons) or, on a CPU box, the CPU (frequency, load,
other processes' share) once every `INTERVAL_S`.

A thread, not a task on the client's event loop: its readings (NVML through ctypes, psutil, a
nvidia-smi subprocess) block, and the loop's stamps must not wait for them. ctypes and psutil
release the GIL while they read, and one reading a second is far below what the client does.
The run's energy is the GPUs' energy counters' difference (Volta and later), else the power
readings integrated over time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import cpu, nvml, smi
from .snapshot import slot_gpus

INTERVAL_S = 1.0
MAX_SAMPLES = 3600          # an hour at one a second; later samples thin out (every other one kept)
# Other processes' mean share of the host's CPU over a run above which the run is marked contended.
CONTENDED_SHARE = 0.25

# Clock event reasons that slow a GPU down (NVML's nvmlClocksEventReason* bits). Idle, the
# application clock setting and a display clock are not slow-downs of a measurement.
THROTTLE_REASONS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}


def throttle_names(mask: int | None) -> list[str]:
    return [] if not mask else [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


class RunMachine(BaseModel):
    """What the machine did during one run: its samples and their summary (stored with the run)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    source: str                          # nvml | nvidia-smi | psutil
    interval_s: float
    wall_s: float
    samples: tuple[dict[str, Any], ...] = ()
    energy_j: float | None = None        # all the slot's GPUs over the run
    energy_source: str | None = None     # "energy counter" | "power samples"
    mean_power_w: float | None = None    # summed over the slot's GPUs
    max_power_w: float | None = None
    mean_sm_util: float | None = None    # %, mean over GPUs and samples
    mean_mem_util: float | None = None
    min_sm_clock_mhz: int | None = None
    throttled: dict[str, float] = {}     # reason -> share of samples it was active in
    mean_cpu_freq_mhz: float | None = None
    mean_cpu_busy: float | None = None       # CPU box: the CPU's busy share, mean over samples (everyone's)
    mean_others_share: float | None = None   # CPU box: other processes' share of the CPU over the run
    max_load1: float | None = None

    @property
    def contended(self) -> bool:
        return self.mean_others_share is not None and self.mean_others_share > CONTENDED_SHARE


def _mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def summarise(source: str, interval_s: float, wall_s: float, samples: Sequence[dict[str, Any]],
              counter_j: float | None, others_share: float | None = None) -> RunMachine:
    """The run's summary from its samples; `counter_j` the energy counters' difference when known,
    `others_share` other processes' share of the CPU over the run (a CPU slot)."""
    powers = [s["power_w"] for s in samples if s.get("power_w") is not None]
    energy, energy_source = counter_j, "energy counter" if counter_j is not None else None
    if energy is None and len(powers) >= 2:
        timed = [(s["t"], s["power_w"]) for s in samples if s.get("power_w") is not None]
        energy = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(timed, timed[1:], strict=False))
        # The trapezoids cover first to last sample; the run's ends are counted at their nearest reading.
        energy += timed[0][1] * timed[0][0] + timed[-1][1] * max(wall_s - timed[-1][0], 0.0)
        energy_source = "power samples"
    reasons: dict[str, int] = {}
    for s in samples:
        for name in s.get("throttle", []):
            reasons[name] = reasons.get(name, 0) + 1
    clocks = [s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None]
    loads = [s["load1"] for s in samples if s.get("load1") is not None]
    return RunMachine(
        source=source, interval_s=interval_s, wall_s=wall_s, samples=tuple(samples),
        energy_j=energy, energy_source=energy_source,
        mean_power_w=_mean(powers), max_power_w=max(powers) if powers else None,
        mean_sm_util=_mean([s.get("sm_util") for s in samples]),
        mean_mem_util=_mean([s.get("mem_util") for s in samples]),
        min_sm_clock_mhz=min(clocks) if clocks else None,
        throttled={name: n / len(samples) for name, n in sorted(reasons.items())},
        mean_cpu_freq_mhz=_mean([s.get("cpu_freq_mhz") for s in samples]),
        mean_cpu_busy=_mean([s.get("cpu_busy") for s in samples]),
        mean_others_share=others_share,
        max_load1=max(loads) if loads else None,
    )


def _gpu_sample(per_gpu: list[dict[str, Any]]) -> dict[str, Any]:
    """One sample of the slot: power summed over its GPUs, utilisation averaged, clocks at the slowest."""
    def values(key: str) -> list[Any]:
        return [g[key] for g in per_gpu if g.get(key) is not None]
    powers, sm_clocks, mem_clocks = values("power_w"), values("sm_clock_mhz"), values("mem_clock_mhz")
    mask = 0
    for reasons in values("reasons"):
        mask |= int(reasons)
    return {"power_w": sum(powers) if powers else None, "sm_util": _mean(values("sm_util")),
            "mem_util": _mean(values("mem_util")), "sm_clock_mhz": min(sm_clocks) if sm_clocks else None,
            "mem_clock_mhz": min(mem_clocks) if mem_clocks else None, "throttle": throttle_names(mask)}


class RunSampler:
    """`with RunSampler(placement_env) as sampler: run...`; then `sampler.result`."""

    def __init__(self, env: Mapping[str, str] | None = None, *, cpus: tuple[int, ...] | None = None,
                 interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._cpus = cpus
        self.result: RunMachine | None = None
        self._ids = slot_gpus(env)
        self._nvml: ModuleType | None = None
        self._devices: list[tuple[int, Any]] = []
        self._source = "psutil"
        if self._ids != []:
            self._nvml = nvml.load()
            if self._nvml is not None:
                self._devices = nvml.handles(self._nvml, self._ids)
                self._source = "nvml" if self._devices else "psutil"
            if not self._devices and smi.exe() is not None:
                self._source = "nvidia-smi"
        self._samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="machine-sampler", daemon=True)
        self._t0 = 0.0
        self._energy0: float | None = None
        # CPU slot: the busy share per sample (cheap), other processes' share over the whole run
        # (this process tree's CPU read at both ends only: a scan of every process each second
        # would take the load generator's GIL).
        self._busy: cpu.BusyMeter | None = None
        self._window: cpu.CpuWindow | None = None

    def _read(self) -> dict[str, Any]:
        sample: dict[str, Any] = {"t": round(time.monotonic() - self._t0, 3)}
        if self._source == "nvml" and self._nvml is not None:
            sample.update(_gpu_sample(nvml.sample(self._nvml, self._devices)))
        elif self._source == "nvidia-smi":
            per_gpu = smi.sample(self._ids)
            if per_gpu:
                sample.update(_gpu_sample(per_gpu))
        elif self._busy is not None:
            load = cpu.load_avg()
            sample.update({"cpu_freq_mhz": cpu.freq_mhz(), "load1": None if load is None else load[0],
                           "cpu_busy": self._busy.read()})
        return sample

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sample = self._read()
            except Exception as exc:  # a reading that fails ends sampling, never the run
                self._samples.append({"t": round(time.monotonic() - self._t0, 3), "error": str(exc)[:200]})
                return
            self._samples.append(sample)
            if len(self._samples) > MAX_SAMPLES:
                self._samples = self._samples[::2]

    def __enter__(self) -> RunSampler:
        self._t0 = time.monotonic()
        if self._nvml is not None and self._devices:
            self._energy0 = nvml.energy_j(self._nvml, self._devices)
        if self._source == "psutil":
            self._busy = cpu.BusyMeter(self._cpus)
            self._window = cpu.CpuWindow(self._cpus, name_others=False)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        wall = time.monotonic() - self._t0
        counter = None
        if self._energy0 is not None and self._nvml is not None:
            end = nvml.energy_j(self._nvml, self._devices)
            counter = None if end is None else max(end - self._energy0, 0.0)
        others = self._window.close()[0] if self._window is not None else None
        self.result = summarise(self._source, self.interval_s, wall, list(self._samples), counter, others)
