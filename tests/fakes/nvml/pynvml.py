"""A fake `pynvml` (nvidia-ml-py's module): the NVML calls servetune makes, answered from a JSON
state file named by FAKE_NVML_STATE, read at every call (a test changes the machine by rewriting it).

Put this folder first on PYTHONPATH (a `servetune tune` subprocess) or in sys.modules (in-process).
State: {"driver": "550.54.15", "cuda": 12040, "gpus": [GPU, ...], "by_boot": [{GPU 0 overrides}, ...]}
with GPU = {"name", "uuid", "power_limit_mw", "app_sm", "app_mem", "max_sm", "max_mem", "persistence",
"ecc", "temp", "mem_used", "mem_total" (bytes), "processes": [{"pid", "used"}], "power_mw", "util",
"mem_util", "sm_clock", "mem_clock", "reasons"}. `by_boot[i]` overrides GPU 0 once GPU 0's
processes were listed i times (servetune lists them once in each boot's record, after reading
the power limit and clocks): the record of the i-th boot (from 0) reads `by_boot[i]`, so a test
changes the power limit between the baseline's boot and the candidate's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    pass


def _path() -> Path:
    return Path(os.environ["FAKE_NVML_STATE"])


def _state() -> dict[str, Any]:
    return json.loads(_path().read_text())


def _listings() -> int:
    counter = _path().with_suffix(".listings")
    return int(counter.read_text()) if counter.exists() else 0


def _gpu(index: int) -> dict[str, Any]:
    state = _state()
    gpu = dict(state["gpus"][index])
    by_boot = state.get("by_boot") or []
    if index == 0 and by_boot:
        gpu.update(by_boot[min(_listings(), len(by_boot) - 1)])
    return gpu


def _field(handle: int, key: str) -> Any:
    value = _gpu(handle).get(key)
    if value is None:
        raise NVMLError(f"{key}: not supported")
    return value


def nvmlInit() -> None:
    _state()


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return str(_state()["driver"])


def nvmlSystemGetCudaDriverVersion() -> int:
    return int(_state()["cuda"])


def nvmlDeviceGetCount() -> int:
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(h: int) -> str:
    return str(_field(h, "name"))


def nvmlDeviceGetUUID(h: int) -> str:
    return str(_field(h, "uuid"))


def nvmlDeviceGetEnforcedPowerLimit(h: int) -> int:
    return int(_field(h, "power_limit_mw"))


def nvmlDeviceGetPowerManagementLimit(h: int) -> int:
    return int(_field(h, "power_limit_mw"))


def nvmlDeviceGetApplicationsClock(h: int, kind: int) -> int:
    return int(_field(h, "app_sm" if kind == NVML_CLOCK_SM else "app_mem"))


def nvmlDeviceGetMaxClockInfo(h: int, kind: int) -> int:
    return int(_field(h, "max_sm" if kind == NVML_CLOCK_SM else "max_mem"))


def nvmlDeviceGetClockInfo(h: int, kind: int) -> int:
    return int(_field(h, "sm_clock" if kind == NVML_CLOCK_SM else "mem_clock"))


def nvmlDeviceGetPersistenceMode(h: int) -> int:
    return int(_field(h, "persistence"))


def nvmlDeviceGetEccMode(h: int) -> list[int]:
    return [int(_field(h, "ecc")), int(_field(h, "ecc"))]


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:
    return int(_field(h, "temp"))


def nvmlDeviceGetMemoryInfo(h: int) -> SimpleNamespace:
    return SimpleNamespace(used=_field(h, "mem_used"), total=_field(h, "mem_total"),
                           free=_field(h, "mem_total") - _field(h, "mem_used"))


def nvmlDeviceGetComputeRunningProcesses(h: int) -> list[SimpleNamespace]:
    if h == 0:
        counter = _path().with_suffix(".listings")
        counter.write_text(str(_listings() + 1))
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used")) for p in _gpu(h).get("processes", [])]


def nvmlDeviceGetUtilizationRates(h: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=_field(h, "util"), memory=_field(h, "mem_util"))


def nvmlDeviceGetPowerUsage(h: int) -> int:
    return int(_field(h, "power_mw"))


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
    # mJ since "the driver loaded": the board's draw over wall time (mW x s = mJ).
    return int(time.time() * _field(h, "power_mw"))


def nvmlDeviceGetCurrentClocksEventReasons(h: int) -> int:
    return int(_gpu(h).get("reasons", 0))
