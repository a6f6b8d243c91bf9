"""The utilization ceiling: the highest --gpu-memory-utilization that boots on this device as it
is now (another process's memory, a display, the CUDA context all count).

The field's numbers: on a 24 GiB card 0.948 passed and 0.95 failed by ~40 MiB, found by hand in
boots of 0.92, 0.94, 0.948. Here the highest value asked (`start`, 0.95 by default) is booted
first; a boot that fails as out of memory at start-up is read for vLLM's own answer ("Free memory
on device (22.76/24.0 GiB) on startup is less than desired GPU memory utilization (0.95, ...)":
free / total is the most that can pass, rounded down to `step`), and only without it is the
range bisected, down to `low`. Any other failure (a crash, a bad flag) ends the probe: less
memory does not cure it. The answer is a value that booted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from ..engine.base import Engine, StartResult
from ..engine.config import Config
from ..errors import ServetuneError
from ..vocabulary import Outcome

FLAG = "gpu-memory-utilization"


class UtilizationBoot(BaseModel):
    """One boot of the probe: the utilization asked for and what the engine said."""

    requested: float
    outcome: str
    kv_cache_tokens: int | None = None
    kv_cache_memory_gib: float | None = None
    free_share: float | None = None  # oom at start-up: free / total memory vLLM found
    detail: str = ""
    log_path: str | None = None
    why: str = ""  # start, free memory, bisection

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.ok


class UtilizationAnswer(BaseModel):
    gpu_memory_utilization: float | None  # None: nothing booted
    source: str  # the boot's `why` that found it, or none
    kv_cache_tokens: int | None = None
    kv_cache_memory_gib: float | None = None
    boots: list[UtilizationBoot] = Field(default_factory=list)
    reason: str = ""  # why there is no answer


UtilizationBootFn = Callable[[float], UtilizationBoot]


def utilization_boot(requested: float, result: StartResult) -> UtilizationBoot:
    facts = result.boot_facts
    return UtilizationBoot(requested=requested, outcome=str(result.outcome), kv_cache_tokens=facts.kv_cache_tokens,
                           kv_cache_memory_gib=facts.kv_cache_memory_gib, free_share=result.free_memory_share,
                           detail=result.detail, log_path=str(result.log_path) if result.log_path else None)


def find_max_utilization(boot: UtilizationBootFn, *, start: float = 0.95, low: float = 0.5, step: float = 0.001,
                         max_boots: int = 8,
                         on_boot: Callable[[UtilizationBoot], None] | None = None) -> UtilizationAnswer:
    """The highest utilization in [low, start] that boots, to within `step`."""
    check_range(start, low, step)
    boots: list[UtilizationBoot] = []
    fits: UtilizationBoot | None = None
    too_high: float | None = None  # the lowest value known not to boot
    candidate, why = start, "start"
    while len(boots) < max_boots:
        b = boot(candidate).model_copy(update={"why": why})
        boots.append(b)
        if on_boot is not None:
            on_boot(b)
        if b.ok:
            fits = b if fits is None or b.requested > fits.requested else fits
        elif b.outcome == Outcome.oom:
            too_high = candidate if too_high is None else min(too_high, candidate)
        else:
            return _no_answer(boots, f"the boot at {FLAG} {candidate:g} failed as {b.outcome}, which less memory "
                              f"does not cure: {b.detail}")
        if too_high is None:
            break  # the highest value asked boots
        floor = fits.requested if fits is not None else None
        if floor is not None and too_high - floor <= step * 1.5:
            break  # the boundary, to within a step
        estimate = None if b.ok else _below(b.free_share, step)
        if estimate is not None and estimate < too_high and (floor is None or estimate > floor):
            candidate, why = estimate, "free memory"  # vLLM's own numbers: the most that can pass
            continue
        if floor is None and too_high <= low:
            return _no_answer(boots, f"{FLAG} {low:g} (--low) did not boot either: the device has less free memory "
                              "than that, or the model does not fit")
        bottom = low if floor is None else floor
        candidate, why = max(bottom if floor is None else floor + step, _round((bottom + too_high) / 2, step)), \
            "bisection"
    if fits is None:
        return _no_answer(boots, "nothing booted within the boot budget")
    return UtilizationAnswer(gpu_memory_utilization=fits.requested, source=fits.why,
                             kv_cache_tokens=fits.kv_cache_tokens, kv_cache_memory_gib=fits.kv_cache_memory_gib,
                             boots=boots)


def _below(share: float | None, step: float) -> float | None:
    """The highest multiple of `step` strictly below the free share (the check is `free < requested`)."""
    if share is None or share <= 0:
        return None
    value = math.floor(share / step) * step
    if value >= share:
        value -= step
    return round(value, 6)


def _round(value: float, step: float) -> float:
    return round(math.floor(value / step) * step, 6)


def _no_answer(boots: list[UtilizationBoot], reason: str) -> UtilizationAnswer:
    return UtilizationAnswer(gpu_memory_utilization=None, source="none", boots=boots, reason=reason)


def check_range(start: float, low: float, step: float) -> None:
    if not 0 < low <= start <= 1:
        raise ServetuneError(f"--low {low:g} and --start {start:g}: expected 0 < low <= start <= 1")
    if not 0 < step < start - low + 1:
        raise ServetuneError(f"--step {step:g}: expected a positive step, e.g. 0.001")


def engine_utilization_boot(engine: Engine, config: Config, log_dir: Path) -> UtilizationBootFn:
    """A boot function that starts `engine` with `config` at a utilization and stops it at once."""
    count = 0

    def boot(value: float) -> UtilizationBoot:
        nonlocal count
        count += 1
        result = engine.start(config.merged(Config.of({FLAG: value})), log_dir / f"probe-utilization-{count:02d}-"
                              f"{value:g}.log")
        if result.server is not None:
            engine.stop(result.server)
        return utilization_boot(value, result)

    return boot
