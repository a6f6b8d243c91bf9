"""GPUs through NVML (`nvidia-ml-py`, imported as `pynvml`): the library nvidia-smi is built on.

Imported lazily: a host without it (or without a driver) gets None here, and the caller falls
back to nvidia-smi, then to the CPU. Every query a GPU may not support (ECC on a consumer card,
application clocks on a cloud GPU) reads as None, never as an error.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from .record import GpuProcess, GpuState

T = TypeVar("T")

_init_lock = threading.Lock()
_initialised: ModuleType | None = None


def load() -> ModuleType | None:
    """pynvml, initialised once per process; None without the module or a driver to talk to."""
    global _initialised
    with _init_lock:
        if _initialised is not None:
            return _initialised
        try:
            pynvml = importlib.import_module("pynvml")
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no NVML here
            return None
        _initialised = pynvml
        return pynvml


def _opt(nvml: ModuleType, fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version(raw: int | None) -> str | None:
    """NVML's 12080 as "12.8"."""
    return None if raw is None else f"{raw // 1000}.{raw % 1000 // 10}"


def handles(nvml: ModuleType, ids: Sequence[str] | None) -> list[tuple[int, Any]]:
    """(host index, handle) of the named devices: indices or UUIDs (a CUDA_VISIBLE_DEVICES mask), all when None."""
    count = _opt(nvml, nvml.nvmlDeviceGetCount) or 0
    out = []
    for i in range(count):
        handle = _opt(nvml, nvml.nvmlDeviceGetHandleByIndex, i)
        if handle is None:
            continue
        uuid = _text(_opt(nvml, nvml.nvmlDeviceGetUUID, handle)) or ""
        if ids is None or str(i) in ids or (uuid and any(uuid.startswith(x) for x in ids if x.startswith("GPU-"))):
            out.append((i, handle))
    return out


def read(ids: Sequence[str] | None, process_name: Callable[[int], str | None]) -> tuple[str | None, str | None,
                                                                                          list[GpuState]] | None:
    """Driver, CUDA version and the state of the named GPUs; None without NVML."""
    nvml = load()
    if nvml is None:
        return None
    driver = _text(_opt(nvml, nvml.nvmlSystemGetDriverVersion))
    cuda = cuda_version(_opt(nvml, nvml.nvmlSystemGetCudaDriverVersion))
    return driver, cuda, [_state(nvml, i, h, process_name) for i, h in handles(nvml, ids)]


def _state(nvml: ModuleType, index: int, h: Any, process_name: Callable[[int], str | None]) -> GpuState:
    limit = _opt(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, h) or _opt(nvml, nvml.nvmlDeviceGetPowerManagementLimit, h)
    memory = _opt(nvml, nvml.nvmlDeviceGetMemoryInfo, h)
    ecc = _opt(nvml, nvml.nvmlDeviceGetEccMode, h)
    persistence = _opt(nvml, nvml.nvmlDeviceGetPersistenceMode, h)
    procs = _opt(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
    return GpuState(
        index=index,
        name=_text(_opt(nvml, nvml.nvmlDeviceGetName, h)) or "unknown GPU",
        uuid=_text(_opt(nvml, nvml.nvmlDeviceGetUUID, h)),
        power_limit_w=None if limit is None else limit / 1000.0,    # mW
        app_sm_clock_mhz=_opt(nvml, nvml.nvmlDeviceGetApplicationsClock, h, nvml.NVML_CLOCK_SM),
        app_mem_clock_mhz=_opt(nvml, nvml.nvmlDeviceGetApplicationsClock, h, nvml.NVML_CLOCK_MEM),
        max_sm_clock_mhz=_opt(nvml, nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
        max_mem_clock_mhz=_opt(nvml, nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
        persistence=None if persistence is None else bool(persistence),
        ecc=None if ecc is None else bool(ecc[0]),
        temperature_c=_opt(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
        memory_used_mib=None if memory is None else memory.used / 2**20,
        memory_total_mib=None if memory is None else memory.total / 2**20,
        processes=tuple(GpuProcess(pid=int(p.pid), name=process_name(int(p.pid)),
                                   used_mib=None if getattr(p, "usedGpuMemory", None) is None
                                   else p.usedGpuMemory / 2**20)
                        for p in procs),
    )


def sample(nvml: ModuleType, devices: Sequence[tuple[int, Any]]) -> list[dict[str, Any]]:
    """Per GPU now: power (W), SM and memory utilisation (%), SM and memory clocks (MHz), the
    clock event (throttle) reasons as a bit mask."""
    out = []
    for index, h in devices:
        util = _opt(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
        power = _opt(nvml, nvml.nvmlDeviceGetPowerUsage, h)
        reasons = _opt(nvml, nvml.nvmlDeviceGetCurrentClocksEventReasons, h) \
            if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons") else None
        if reasons is None:
            reasons = _opt(nvml, nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        out.append({"gpu": index, "power_w": None if power is None else power / 1000.0,
                    "sm_util": None if util is None else util.gpu, "mem_util": None if util is None else util.memory,
                    "sm_clock_mhz": _opt(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
                    "mem_clock_mhz": _opt(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
                    "reasons": reasons})
    return out


def energy_j(nvml: ModuleType, devices: Sequence[tuple[int, Any]]) -> float | None:
    """The devices' energy counters summed (J since the driver loaded); None when one has none (pre-Volta)."""
    total = 0.0
    for _, h in devices:
        mj = _opt(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        if mj is None:
            return None
        total += mj / 1000.0
    return total
