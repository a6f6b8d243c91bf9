"""How close are servetune's TTFT/ITL stamps to the truth at many simultaneous streams?

Drives the FAKE streaming server (tests/fakes/fake_stream_server.py: first chunk after
--ttft-ms, then one every --itl-ms, every stream in step, so each tick is a burst of --streams
chunks) and compares each chunk's client stamp with the server's send stamp (same host, same
monotonic clock). Prints every run: error p50/p99/max of TTFT and ITL, and the event loop's lag.

    .venv/bin/python benchmarks/client_accuracy.py [--streams 256 --runs 3]

Target: p99 <= 1 ms at 256 streams.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fakes.accuracy import errors_ms, measure  # noqa: E402
from tests.fakes.launch import fake_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3, help="runs per endpoint")
    ap.add_argument("--ttft-ms", type=float, default=100)
    ap.add_argument("--itl-ms", type=float, default=50)
    args = ap.parse_args()
    table = Table(title=f"stamp error vs the server's send time, {args.streams} simultaneous streams (ms)")
    for col in ("endpoint", "run", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "ITL max", "loop lag p99"):
        table.add_column(col, justify="right")
    with fake_server(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms) as url:
        for endpoint in ("completions", "chat"):
            for run in range(args.runs):
                res, truth, prompts = measure(url, endpoint, args.streams)
                ttft, itl = errors_ms(res, truth, prompts)
                lag = np.percentile(res.loop_lag_ns, 99) / 1e6 if res.loop_lag_ns else float("nan")
                table.add_row(endpoint, str(run), *(f"{v:.3f}" for v in (
                    np.median(ttft), np.percentile(ttft, 99), np.median(itl), np.percentile(itl, 99), itl.max(), lag)))
    Console().print(table)


if __name__ == "__main__":
    main()
