"""Measure the GPU's HBM read bandwidth, and the batch-1 decode roofline of a model.

    python3 benchmarks/hbm_bandwidth.py [--weights-gib 15.27] [--tpot-ms 5.16] [--json OUT]

Bandwidth (servetune.engine.bandwidth, which a study also runs at its start): a large
device-to-device copy (bytes read + bytes written over the time), and a read-only reduction
(sum over a large bf16 tensor), best of several repetitions each. The
roofline: a batch-1 decode step must read every weight once, so its shortest possible time is
weight bytes / read bandwidth; a measured TPOT gives the fraction of that roofline reached.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from servetune.engine.bandwidth import measure_cuda
from servetune.report.roofline import GIB, floor_tpot_ms, roofline_fraction


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights-gib", type=float, help="model weight memory (BootFacts model_load_gib)")
    parser.add_argument("--tpot-ms", type=float, help="measured batch-1 TPOT")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    out: dict[str, float | str] = measure_cuda()
    print(f"{out['device']}: copy {out['copy_gbps']:.0f} GB/s (read+write), read {out['read_gbps']:.0f} GB/s")
    if args.weights_gib:
        floor_ms = floor_tpot_ms(args.weights_gib * GIB, float(out["read_gbps"]))
        out.update({"weights_gib": args.weights_gib, "decode_floor_ms": floor_ms})
        print(f"batch-1 decode floor: {args.weights_gib} GiB / read bandwidth = {floor_ms:.2f} ms per token")
        if args.tpot_ms:
            fraction = roofline_fraction(floor_ms, args.tpot_ms)
            out.update({"tpot_ms": args.tpot_ms, "roofline_fraction": fraction})
            print(f"measured TPOT {args.tpot_ms} ms -> {100 * fraction:.0f} % of the roofline")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
