"""On the GPU machine, without vLLM: servetune's machine record and run sampler on a real GPU.

    python3 scripts/h200/machine_call.py OUT.json [SECONDS]   (PYTHONPATH: servetune and pydantic)

1. GPU 0's record before any load (NVML, else nvidia-smi) and what the busy-machine guard says of it;
2. a bf16 matmul load of SECONDS in this process, sampled by the RunSampler a study's runs use:
   power, SM and memory utilisation, clocks, throttle reasons, energy (NVML's counter, else the
   power samples integrated); joules per TFLOP of the work done, a check that the energy is the
   load's own;
3. the record again while this process holds GPU memory: the guard must name it as a tenant.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from servetune.machine import RunSampler, busy_reasons, take


def main(out: str, seconds: float) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    before = take(env)
    doc: dict[str, object] = {"record_before": before.model_dump(mode="json"), "busy_before": busy_reasons(before)}
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    torch.cuda.synchronize()
    matmuls = 0
    with RunSampler(env) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(50):
                a @ b
            torch.cuda.synchronize()
            matmuls += 50
        wall = time.perf_counter() - t0
    run = sampler.result
    assert run is not None
    tflop = 2 * n**3 * matmuls / 1e12
    summary = run.model_dump(mode="json")
    samples = summary.pop("samples")
    doc.update(load={"matmuls": matmuls, "wall_s": wall, "tflops": tflop / wall}, run=summary,
               samples=len(samples), first_samples=samples[:2],
               joules_per_tflop=run.energy_j / tflop if run.energy_j else None)
    held = take(env)
    doc.update(record_while_held=held.model_dump(mode="json"), busy_while_held=busy_reasons(held))
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    shown = {k: v for k, v in doc.items() if k not in ("first_samples", "record_while_held")}
    print(json.dumps(shown, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 10.0)
