"""GPUs through `nvidia-smi --query-gpu=... --format=csv`: the fallback where NVML's Python
binding is missing. Same record, a subprocess per reading (the sampler reads at most once a second)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from .record import GpuProcess, GpuState

TIMEOUT_S = 20.0
STATE_FIELDS = ("index", "name", "uuid", "driver_version", "power.limit", "clocks.applications.graphics",
                "clocks.applications.memory", "clocks.max.sm", "clocks.max.memory", "persistence_mode",
                "ecc.mode.current", "temperature.gpu", "memory.used", "memory.total")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
SAMPLE_FIELDS = ("index", "power.draw", "utilization.gpu", "utilization.memory", "clocks.sm", "clocks.mem",
                 "clocks_throttle_reasons.active")
_CUDA = re.compile(r"CUDA Version\s*:?\s*([0-9.]+)")


def exe() -> str | None:
    return shutil.which("nvidia-smi")


def _query(program: str, args: list[str]) -> str | None:
    try:
        done = subprocess.run([program, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def rows(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """CSV rows (noheader, nounits) as {field: value}; "[N/A]", "[Not Supported]", "N/A" are None."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        out.append({f: (None if not p or p.strip("[]") in ("N/A", "Not Supported", "Unknown Error") else p)
                    for f, p in zip(fields, parts, strict=True)})
    return out


def _num(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


def _flag(value: str | None) -> bool | None:
    return None if value is None else value.lower() in ("enabled", "on", "1")


def parse_states(text: str, apps: str, process_name: Callable[[int], str | None]) -> list[GpuState]:
    procs: dict[str, list[GpuProcess]] = {}
    for app in rows(apps, APP_FIELDS):
        pid = _int(app["pid"])
        if pid is not None and app["gpu_uuid"]:
            procs.setdefault(app["gpu_uuid"], []).append(
                GpuProcess(pid=pid, used_mib=_num(app["used_memory"]), name=process_name(pid) or app["process_name"]))
    return [GpuState(
        index=_int(r["index"]) or 0, name=r["name"] or "unknown GPU", uuid=r["uuid"],
        power_limit_w=_num(r["power.limit"]),
        app_sm_clock_mhz=_int(r["clocks.applications.graphics"]),
        app_mem_clock_mhz=_int(r["clocks.applications.memory"]),
        max_sm_clock_mhz=_int(r["clocks.max.sm"]), max_mem_clock_mhz=_int(r["clocks.max.memory"]),
        persistence=_flag(r["persistence_mode"]), ecc=_flag(r["ecc.mode.current"]),
        temperature_c=_num(r["temperature.gpu"]), memory_used_mib=_num(r["memory.used"]),
        memory_total_mib=_num(r["memory.total"]), processes=tuple(procs.get(r["uuid"] or "", ())),
    ) for r in rows(text, STATE_FIELDS)]


def _selected(gpus: list[GpuState], ids: Sequence[str] | None) -> list[GpuState]:
    if ids is None:
        return gpus
    return [g for g in gpus if str(g.index) in ids or (g.uuid and any(g.uuid.startswith(x) for x in ids))]


def read(ids: Sequence[str] | None, process_name: Callable[[int], str | None]) -> tuple[str | None, str | None,
                                                                                          list[GpuState]] | None:
    """Driver, CUDA version and the named GPUs' state; None without a working nvidia-smi."""
    program = exe()
    if program is None:
        return None
    text = _query(program, [f"--query-gpu={','.join(STATE_FIELDS)}", "--format=csv,noheader,nounits"])
    if text is None:
        return None
    apps = _query(program, [f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits"]) or ""
    drivers = {r["driver_version"] for r in rows(text, STATE_FIELDS) if r["driver_version"]}
    version = _query(program, ["--version"]) or ""
    cuda = _CUDA.search(version)
    return (next(iter(sorted(drivers)), None), cuda.group(1) if cuda else None,
            _selected(parse_states(text, apps, process_name), ids))


def sample(ids: Sequence[str] | None) -> list[dict[str, Any]] | None:
    """Per GPU now, as nvml.sample gives it; None when nvidia-smi did not answer."""
    program = exe()
    text = None if program is None else _query(
        program, [f"--query-gpu={','.join(SAMPLE_FIELDS)}", "--format=csv,noheader,nounits"])
    if text is None:
        return None
    out = []
    for r in rows(text, SAMPLE_FIELDS):
        index = _int(r["index"]) or 0
        if ids is not None and str(index) not in ids:
            continue
        reasons = r["clocks_throttle_reasons.active"]
        out.append({"gpu": index, "power_w": _num(r["power.draw"]), "sm_util": _num(r["utilization.gpu"]),
                    "mem_util": _num(r["utilization.memory"]), "sm_clock_mhz": _int(r["clocks.sm"]),
                    "mem_clock_mhz": _int(r["clocks.mem"]),
                    "reasons": int(reasons, 16) if reasons and reasons.startswith("0x") else None})
    return out
