"""What a boot ran on: the GPUs of its slot (NVML, else nvidia-smi) and the host's CPU (psutil).

A `MachineRecord` is taken before each boot and stored with the trial. Two records are *like*
when what sets a GPU's speed is the same: GPU model, driver, power limit and application clocks
(`differences`). Temperature, memory in use and other tenants change from boot to boot and are
kept as evidence, not compared.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class GpuProcess(_Frozen):
    """A compute process on a GPU; `name` where the process table shows it (another container's is unknown)."""

    pid: int
    used_mib: float | None = None
    name: str | None = None


class GpuState(_Frozen):
    index: int                      # the device's index on the host (NVML / nvidia-smi order)
    name: str
    uuid: str | None = None
    power_limit_w: float | None = None
    app_sm_clock_mhz: int | None = None     # application clocks: what the GPU runs at under load
    app_mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    persistence: bool | None = None
    ecc: bool | None = None
    temperature_c: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    processes: tuple[GpuProcess, ...] = ()


class CpuState(_Frozen):
    model: str | None = None
    cores: int = 1                  # logical CPUs of the host
    slot_cpus: tuple[int, ...] | None = None   # the slot's own CPUs (None: the whole host)
    freq_mhz: float | None = None   # current, mean over cores
    freq_max_mhz: float | None = None
    load_avg: tuple[float, float, float] | None = None
    # Other processes' share of the host's CPU (0..1 of all cores) over a short window before the
    # boot: everything but this process and its children; of the slot's own CPUs where it has
    # them (slot_cpus). None where it was not measured.
    others_share: float | None = None
    busiest: tuple[str, ...] = ()   # the heaviest other processes, "name (pid 12): 85 %"


class MachineRecord(_Frozen):
    source: str                     # nvml | nvidia-smi | psutil: where the GPU part came from
    taken_at: float
    driver: str | None = None
    cuda: str | None = None         # the driver's CUDA version, "12.8"
    gpus: tuple[GpuState, ...] = () # the slot's GPUs; none on a CPU box
    cpu: CpuState | None = None

    @property
    def is_gpu(self) -> bool:
        return bool(self.gpus)

    def label(self) -> str:
        """One line: what it is and how it was set, for the report and the CLI."""
        if not self.gpus:
            cpu = self.cpu or CpuState()
            freq = f", {cpu.freq_mhz:.0f} MHz" if cpu.freq_mhz else ""
            return f"CPU {cpu.model or 'unknown'} ({cpu.cores} logical CPUs{freq})"
        names = sorted({g.name for g in self.gpus})
        limits = sorted({g.power_limit_w for g in self.gpus if g.power_limit_w is not None})
        power = f", power limit {'/'.join(f'{w:.0f}' for w in limits)} W" if limits else ""
        return (f"{len(self.gpus)} x {', '.join(names)}, driver {self.driver or '?'}, CUDA {self.cuda or '?'}"
                f"{power}")


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def differences(reference: MachineRecord, other: MachineRecord) -> list[str]:
    """What sets speed and differs between two records, e.g. "GPU 0 power limit 700 W -> 500 W";
    empty when they are like machines. GPUs are compared in slot order (a slot's first with the
    other slot's first): slots of one host hold the same model, and a different model is a difference."""
    out: list[str] = []
    if reference.is_gpu != other.is_gpu:
        return [f"{'GPU' if reference.is_gpu else 'CPU'} -> {'GPU' if other.is_gpu else 'CPU'}"]
    if reference.driver and other.driver and reference.driver != other.driver:
        out.append(f"driver {reference.driver} -> {other.driver}")
    if len(reference.gpus) != len(other.gpus):
        out.append(f"{len(reference.gpus)} GPUs -> {len(other.gpus)}")
    for i, (a, b) in enumerate(zip(reference.gpus, other.gpus, strict=False)):
        for what, x, y, unit in (("model", a.name, b.name, ""),
                                 ("power limit", a.power_limit_w, b.power_limit_w, " W"),
                                 ("application SM clock", a.app_sm_clock_mhz, b.app_sm_clock_mhz, " MHz"),
                                 ("application memory clock", a.app_mem_clock_mhz, b.app_mem_clock_mhz, " MHz")):
            if x is not None and y is not None and x != y:
                out.append(f"GPU {i} {what} {_shown(x)}{unit} -> {_shown(y)}{unit}")
    if not reference.is_gpu and reference.cpu and other.cpu and reference.cpu.model and other.cpu.model \
            and reference.cpu.model != other.cpu.model:
        out.append(f"CPU {reference.cpu.model} -> {other.cpu.model}")
    return out
