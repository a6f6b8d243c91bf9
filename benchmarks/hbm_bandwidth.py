"""Measure the GPU's HBM read bandwidth, and the batch-1 decode roofline of a model.

    python3 benchmarks/hbm_bandwidth.py [--weights-gib 15.27] [--tpot-ms 5.16] [--json OUT]

Bandwidth: a large device-to-device copy (bytes read + bytes written over the time), and a
read-only reduction (sum over a large bf16 tensor), best of several repetitions each. The
roofline: a batch-1 decode step must read every weight once, so its shortest possible time is
weight bytes / read bandwidth; a measured TPOT gives the fraction of that roofline reached.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def _time_ms(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def measure(gib: float = 8.0, repeats: int = 10) -> dict[str, float]:
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    src.sum(dtype=torch.float32)
    torch.cuda.synchronize()
    copy_ms = _time_ms(lambda: dst.copy_(src), repeats)
    read_ms = _time_ms(lambda: src.sum(dtype=torch.float32), repeats)
    nbytes = src.numel() * src.element_size()
    return {
        "tensor_gib": nbytes / 2**30,
        "copy_gbps": 2 * nbytes / (copy_ms / 1e3) / 1e9,   # read + write
        "read_gbps": nbytes / (read_ms / 1e3) / 1e9,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights-gib", type=float, help="model weight memory (BootFacts model_load_gib)")
    parser.add_argument("--tpot-ms", type=float, help="measured batch-1 TPOT")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    out: dict[str, float | str] = {"device": torch.cuda.get_device_name(0), **measure()}
    print(f"{out['device']}: copy {out['copy_gbps']:.0f} GB/s (read+write), read {out['read_gbps']:.0f} GB/s")
    if args.weights_gib:
        floor_ms = args.weights_gib * 2**30 / (out["read_gbps"] * 1e9) * 1e3
        out.update({"weights_gib": args.weights_gib, "decode_floor_ms": floor_ms})
        print(f"batch-1 decode floor: {args.weights_gib} GiB / read bandwidth = {floor_ms:.2f} ms per token")
        if args.tpot_ms:
            out.update({"tpot_ms": args.tpot_ms, "roofline_fraction": floor_ms / args.tpot_ms})
            print(f"measured TPOT {args.tpot_ms} ms -> {100 * floor_ms / args.tpot_ms:.0f} % of the roofline")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
