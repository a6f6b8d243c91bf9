"""The device's memory read bandwidth: the denominator of a decode step's physical floor.

GPU through torch where CUDA is present, else the host's RAM through numpy. Each is a read-only
reduction over a buffer far larger than any cache (bytes read over the best of a few
repetitions) and a copy (bytes read + written). A study measures once, in a subprocess of the
engine command's interpreter (`python bandwidth.py` prints one JSON line): that interpreter
has the engine's torch, and the GPU memory the measurement takes is freed when the subprocess
exits, before any server boots. This file imports only the standard library, numpy and torch,
so it runs as a script where servetune itself is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

MEASURE_TIMEOUT_S = 300.0
GPU_BUFFER_GIB = 8.0     # as benchmarks/hbm_bandwidth.py: far beyond any GPU's L2
CPU_BUFFER_GIB = 0.5     # beyond a server CPU's last-level cache, small enough for a laptop


def gbps(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e9


def measure_cuda(gib: float = GPU_BUFFER_GIB, repeats: int = 10) -> dict[str, Any]:
    import torch

    # torch.cuda.Event's constructor carries no annotations: called as the typed callable it is.
    timing_event = cast(Callable[..., torch.cuda.Event], torch.cuda.Event)

    def best_ms(fn: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(repeats):
            start, end = timing_event(enable_timing=True), timing_event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end))
        return best

    src = torch.empty(int(gib * 2**30) // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)                       # first use: allocation and kernel load, not timed
    src.sum(dtype=torch.float32)
    torch.cuda.synchronize()
    copy_ms = best_ms(lambda: dst.copy_(src))
    read_ms = best_ms(lambda: src.sum(dtype=torch.float32))
    nbytes = src.numel() * src.element_size()
    return {"device": torch.cuda.get_device_name(0), "method": "torch bf16 sum (read), copy (read + write)",
            "tensor_gib": nbytes / 2**30, "read_gbps": gbps(nbytes, read_ms / 1e3),
            "copy_gbps": gbps(2 * nbytes, copy_ms / 1e3)}


def measure_cpu(gib: float = CPU_BUFFER_GIB, repeats: int = 5) -> dict[str, Any]:
    import platform

    import numpy as np

    def best_s(fn: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        return best

    src = np.ones(int(gib * 2**30) // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)                  # first touch: page faults, not timed
    read_s = best_s(lambda: src.sum())
    copy_s = best_s(lambda: np.copyto(dst, src))
    return {"device": f"cpu {platform.processor() or platform.machine()}",
            "method": "numpy float32 sum (read), copy (read + write)",
            "tensor_gib": src.nbytes / 2**30, "read_gbps": gbps(src.nbytes, read_s),
            "copy_gbps": gbps(2 * src.nbytes, copy_s)}


def measure() -> dict[str, Any]:
    """The GPU's bandwidth where torch sees CUDA, else the host's."""
    try:
        import torch
        if torch.cuda.is_available():
            return measure_cuda()
    except ImportError:
        pass
    return measure_cpu()


def measure_with(python: str, env: dict[str, str] | None = None,
                 timeout_s: float = MEASURE_TIMEOUT_S) -> dict[str, Any] | str:
    """Measure in a subprocess of `python` (with `env`, e.g. a slot's CUDA_VISIBLE_DEVICES):
    the numbers, or one line saying why there are none."""
    # Imported here: as a script this file needs only the standard library, numpy and torch.
    from servetune.engine.helper_process import run_helper

    try:
        done = run_helper(python, [__file__], timeout_s=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"measuring with {python} failed ({exc})"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"{python} could not measure ({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})"
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return f"{python} answered something other than JSON"
    if not isinstance(answer, dict) or not isinstance(answer.get("read_gbps"), (int, float)):
        return f"{python} answered without a read bandwidth"
    return answer


if __name__ == "__main__":
    print(json.dumps(measure()))
    sys.exit(0)
