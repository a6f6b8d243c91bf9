"""Levels and requests a capacity search needs, and how far its answer is from the truth:
servetune's search (intervals, pooled repeats, early stops) next to the plain searches other tools
run, on the same simulated server of known capacity (tests/fakes/queue_model.py, no HTTP).

- auto_tune-style (vLLM benchmarks/auto_tune.sh): one run at an unlimited rate gives the
  throughput; then the rate starts there and is lowered step by step (5 % of it) until one run's
  point p99 fits the SLO.
- plain bisection: bracket by doubling, bisect until 5 % apart, judged on one run's point p99.

Run: python benchmarks/capacity_search.py [--searches 50] [--requests 1000] [--bursty]
(--bursty: also servetune alone in gamma-0.5 traffic with a p95 SLO and 200 requests a run,
the H200 capacity study's chat regime)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servetune.capacity.estimate import estimate  # noqa: E402
from servetune.capacity.search import SearchSettings, search  # noqa: E402
from servetune.capacity.slo import parse_slo  # noqa: E402
from tests.fakes.queue_model import QueueModel, simulated_measure  # noqa: E402

MODEL = QueueModel(slots=16, prefill_ms=20.0, itl_ms=10.0, output_len=8)
LIMIT_MS, Q = 100.0, 0.99


class PointRuns:
    """One run per level, judged on its point p99 (what the other tools do); counts requests."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.rng = n, np.random.default_rng(seed)
        self.levels = 0
        self.requests = 0

    def p99(self, rate: float) -> float:
        self.levels += 1
        self.requests += self.n
        arrival, first, _ = MODEL.run(rate, self.n, self.rng)
        return float(np.percentile((first - arrival) * 1000.0, 100 * Q))

    def throughput(self) -> float:
        """A run with every request sent at once: completions per second."""
        self.levels += 1
        self.requests += self.n
        _, _, end = MODEL.run(1e6, self.n, self.rng)
        return self.n / float(end.max())


def auto_tune_like(n: int, seed: int) -> tuple[float, int, int, int]:
    runs = PointRuns(n, seed)
    top = runs.throughput()
    step = 0.05 * top
    rate = top
    while rate > step and runs.p99(rate) > LIMIT_MS:
        rate -= step
    return rate, runs.levels, runs.levels, runs.requests


def plain_bisection(n: int, seed: int, start: float = 5.0, rel_tol: float = 0.05) -> tuple[float, int, int, int]:
    runs = PointRuns(n, seed)
    below, above, rate = 0.0, math.inf, start
    while not math.isfinite(above):
        if runs.p99(rate) > LIMIT_MS:
            above = rate
        else:
            below, rate = rate, rate * 2
    while below > 0 and (above - below) / below > rel_tol:
        mid = math.sqrt(below * above)
        if runs.p99(mid) > LIMIT_MS:
            above = mid
        else:
            below = mid
    return below, runs.levels, runs.levels, runs.requests


def servetune_search(n: int, seed: int) -> tuple[float, int, int, bool]:
    slos = [parse_slo(f"ttft:p{Q * 100:g}={LIMIT_MS:g}")]
    result = search(simulated_measure(MODEL, slos, n, 0.05, seed), slos,
                    SearchSettings(start=5.0, min_level=0.5, max_level=500.0))
    est = estimate(result.levels)
    runs = sum(len(r.samples) for r in result.levels)
    return est.capacity, len(result.levels), runs, result.requests, (est.low, est.high)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--searches", type=int, default=50)
    p.add_argument("--requests", type=int, default=1000, help="requests a run")
    p.add_argument("--bursty", action="store_true", help="also servetune in bursty traffic with a p95 SLO")
    args = p.parse_args()
    console = Console(width=150)
    truth = MODEL.true_crossing(Q, LIMIT_MS, args.requests, runs=300)
    console.print(f"simulated server: {MODEL.slots} slots, saturates at {MODEL.saturation_rate:.1f} req/s; "
                  f"SLO p99 TTFT <= {LIMIT_MS:g} ms holds up to {truth:.1f} req/s (truth, 300 runs a rate)")
    table = Table(title=f"{args.searches} searches each, {args.requests} requests a run")
    for col in ("method", "levels (mean)", "runs (mean)", "requests (mean)", "|error| median", "|error| p95", "within 10 %",
                "interval covers truth"):
        table.add_column(col, justify="right" if col != "method" else "left")
    methods: list[tuple[str, Callable[[int, int], tuple]]] = [
        ("servetune (intervals, early stop)", servetune_search),
        ("plain bisection (point p99)", plain_bisection),
        ("auto_tune-style (lower the rate)", auto_tune_like),
    ]
    for name, fn in methods:
        outs = [fn(args.requests, seed) for seed in range(args.searches)]
        err = np.array([abs(o[0] / truth - 1) for o in outs])
        cover = (f"{np.mean([o[4][0] <= truth <= o[4][1] for o in outs]):.0%}" if len(outs[0]) > 4 else "no interval")
        table.add_row(name, f"{np.mean([o[1] for o in outs]):.1f}", f"{np.mean([o[2] for o in outs]):.1f}",
                      f"{np.mean([o[3] for o in outs]):,.0f}",
                      f"{np.median(err):.1%}", f"{np.quantile(err, 0.95):.1%}", f"{np.mean(err <= 0.10):.0%}", cover)
    console.print(table)
    if args.bursty:
        bursty(console, args.searches)


def bursty(console: Console, searches: int) -> None:
    """servetune alone in the chat-bursty regime of the H200 study: gamma arrivals of shape 0.5,
    a p95 SLO, 200 requests a run, at most 8 levels and 2 runs a level."""
    n, shape, limit = 200, 0.5, 100.0
    slos = [parse_slo(f"ttft:p95={limit:g}")]
    truth = MODEL.true_crossing(0.95, limit, n, runs=300, seed=5, burstiness=shape)
    settings = SearchSettings(start=20.0, min_level=0.5, max_level=500.0, rel_tol=0.1, max_levels=8,
                              max_runs_per_level=2)
    ests = [estimate(search(simulated_measure(MODEL, slos, n, 0.05, seed, burstiness=shape), slos, settings).levels)
            for seed in range(searches)]
    err = np.array([abs(e.capacity / truth - 1) for e in ests])
    console.print(f"bursty (gamma shape {shape}), p95 TTFT <= {limit:g} ms, {n} requests a run: truth {truth:.1f} "
                  f"req/s; servetune over {searches} searches: |error| median {np.median(err):.1%}, "
                  f"within 10 % {np.mean(err <= 0.10):.0%}, interval covers truth "
                  f"{np.mean([e.low <= truth <= e.high for e in ests]):.0%}")


if __name__ == "__main__":
    main()
