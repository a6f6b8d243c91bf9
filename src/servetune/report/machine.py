"""The report's Machine section: what the study was measured on (driver, CUDA, GPUs, power limit,
clocks; the CPU on a CPU box), each boot's machine and other tenants, the throttling seen during
its runs, boots left out for an unlike machine, and every config's energy per output token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..analysis.machine_check import reference_of
from ..analysis.types import Estimate, StudyAnalysis
from ..engine.config import Config
from ..machine import MachineRecord, busy_reasons
from ..store import Trial


@dataclass
class GpuLine:
    index: int
    name: str
    uuid: str
    power_limit: str          # "700 W"
    app_clocks: str           # SM / memory, "1980 / 2619 MHz"
    max_clocks: str
    persistence: str          # on | off | ?
    ecc: str


@dataclass
class BootLine:
    seq: int
    role: str
    label: str
    at_boot: str              # "700 W, 34 °C, 612 MiB used" / "CPU 2.4 GHz, load 0.4"
    tenants: str              # "none" or who else was there
    mean_power_w: float | None
    throttled: str            # "power cap 35 % of samples" / "none" / "–" (not sampled)
    contended_runs: int       # runs marked contended: the client's loop lagged, or others took much of the CPU
    unlike: str               # how it differs from its baseline's machine (left out), or ""


@dataclass
class EnergyRow:
    label: str
    scenario: str
    joules_per_token: Estimate
    tokens_per_joule: Estimate
    boots: int
    source: str


@dataclass
class MachineView:
    recorded: bool                         # some trial has a record (a store from before: False)
    label: str = ""                        # one line: the measured machine
    source: str = ""
    cpu: str = "–"
    gpus: list[GpuLine] = field(default_factory=list)
    boots: list[BootLine] = field(default_factory=list)
    energy: list[EnergyRow] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)   # one line per boot left out of the verdict
    throttled: list[str] = field(default_factory=list)  # one line per boot that throttled


def _flag(value: bool | None) -> str:
    return "?" if value is None else "on" if value else "off"


def _pair(a: int | None, b: int | None) -> str:
    return "–" if a is None and b is None else f"{a if a is not None else '?'} / {b if b is not None else '?'} MHz"


def _gpu_lines(record: MachineRecord) -> list[GpuLine]:
    return [GpuLine(g.index, g.name, g.uuid or "–",
                    f"{g.power_limit_w:.0f} W" if g.power_limit_w is not None else "?",
                    _pair(g.app_sm_clock_mhz, g.app_mem_clock_mhz), _pair(g.max_sm_clock_mhz, g.max_mem_clock_mhz),
                    _flag(g.persistence), _flag(g.ecc)) for g in record.gpus]


def at_boot(record: MachineRecord) -> str:
    """The state that changes from boot to boot, in a few words."""
    if record.gpus:
        parts = []
        for g in record.gpus:
            bits = [f"{g.power_limit_w:.0f} W" if g.power_limit_w is not None else "",
                    f"{g.temperature_c:.0f} °C" if g.temperature_c is not None else "",
                    f"{g.memory_used_mib:,.0f} MiB used" if g.memory_used_mib is not None else ""]
            parts.append(f"GPU {g.index}: " + ", ".join(b for b in bits if b))
        return "; ".join(parts)
    cpu = record.cpu
    if cpu is None:
        return "–"
    bits = [f"{cpu.freq_mhz:.0f} MHz" if cpu.freq_mhz else "",
            f"load {cpu.load_avg[0]:.1f}" if cpu.load_avg else "",
            f"others {100 * cpu.others_share:.0f} % of the CPU" if cpu.others_share is not None else ""]
    return ", ".join(b for b in bits if b) or "–"


def throttling(trial: Trial) -> str:
    """The clock event reasons active during the trial's runs, as a share of all their samples."""
    sampled = [r.machine for r in trial.runs if r.machine is not None and r.machine.samples]
    if not sampled:
        return "–"
    total = sum(len(m.samples) for m in sampled)
    seen: dict[str, float] = {}
    for m in sampled:
        for reason, share in m.throttled.items():
            seen[reason] = seen.get(reason, 0.0) + share * len(m.samples)
    if not seen:
        return "none"
    return ", ".join(f"{reason} {100 * n / total:.0f} % of samples" for reason, n in sorted(seen.items()))


def _mean_power(trial: Trial) -> float | None:
    powers = [r.machine.mean_power_w for r in trial.runs if r.machine is not None and r.machine.mean_power_w]
    return sum(powers) / len(powers) if powers else None


def build_machine(analysis: StudyAnalysis, trials: Sequence[Trial], base: Config | None) -> MachineView:
    recorded = [t for t in trials if t.machine is not None]
    if not recorded:
        return MachineView(recorded=False)
    reference = reference_of(recorded[0], trials) or recorded[0].machine
    assert reference is not None
    unlike = {tid: diffs for c in analysis.configs for tid, diffs in c.unlike_machine.items()}
    boots: list[BootLine] = []
    excluded: list[str] = []
    throttled: list[str] = []
    for t in recorded:
        assert t.machine is not None
        label = t.config.label(base)
        tenants = busy_reasons(t.machine)
        throttle = throttling(t)
        line = BootLine(t.seq, str(t.role), label, at_boot(t.machine), "; ".join(tenants) or "none",
                        _mean_power(t), throttle,
                        sum(1 for r in t.runs if r.client_health.get("contended")),
                        "; ".join(unlike.get(t.id, [])))
        boots.append(line)
        if line.unlike:
            excluded.append(f"trial {t.seq} ({t.role}, {label}): {line.unlike}; left out of every estimate and "
                            "verdict until its config is measured on a machine like its baseline's")
        if throttle not in ("none", "–"):
            throttled.append(f"trial {t.seq} ({t.role}, {label}): {throttle}")
    energy = [EnergyRow(c.label, scenario, e.joules_per_token, e.tokens_per_joule, e.boots, e.source)
              for c in analysis.configs for scenario, e in c.energy.items()]
    cpu = reference.cpu
    return MachineView(
        recorded=True, label=reference.label(), source=reference.source,
        cpu=(f"{cpu.model or 'unknown'}, {cpu.cores} logical CPUs"
             + (f", up to {cpu.freq_max_mhz:.0f} MHz" if cpu.freq_max_mhz else "")) if cpu else "–",
        gpus=_gpu_lines(reference), boots=boots, energy=energy, excluded=excluded, throttled=throttled)
