"""Levels, requests and time a capacity search needs, and how far its answer is from the truth:
servetune's search next to the plain searches other tools run, on the same simulated server of
known capacity (tests/fakes/queue_model.py, no HTTP), and how often a level above the capacity
is called met (the false-pass rate) with and without the interim looks.

- servetune before: levels of fixed length (judged at each run's end), started at 5 req/s.
- servetune + looks: interim looks (capacity/sequential.py), a level ends once decided.
- servetune + probe: the first level at 0.7 of what a 5 s closed loop of 128 users completes.
- servetune (defaults): both; the interval is the verdicts' bracket intersected with the fitted
  crossing's (capacity/estimate.py), and the search stops once that interval is narrow.
- auto_tune-style (vLLM benchmarks/auto_tune.sh): one run at an unlimited rate gives the
  throughput; then the rate starts there and is lowered step by step (5 % of it) until one run's
  point p99 fits the SLO.
- plain bisection: bracket by doubling, bisect until 5 % apart, judged on one run's point p99.

Wall time is the simulated time the requests take (arrival of the first to the last end judged,
summed over runs, plus the probe's), not the time this script computes.

Run: python benchmarks/capacity_search.py [--searches 100] [--first-seed 0] [--requests 1000] [--false-pass 400] [--bursty]
[--known-server]
(--bursty: also servetune alone in gamma-0.5 traffic with a p95 SLO and 200 requests a run,
the H200 capacity study's chat regime; --known-server: also servetune's defaults on the queue model
of capacity_known_server.py's server, 500 requests a run, without HTTP: its minutes measuring)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import capacity_known_server as known  # noqa: E402
from servetune.capacity.estimate import FIT, estimate  # noqa: E402
from servetune.capacity.probe import PROBE_SECONDS, PROBE_USERS, SaturationProbe, completion_rate  # noqa: E402
from servetune.capacity.search import SearchSettings, search, settings_for  # noqa: E402
from servetune.capacity.slo import Verdict, parse_slo  # noqa: E402
from tests.fakes.queue_model import QueueModel, simulated_measure  # noqa: E402

MODEL = QueueModel(slots=16, prefill_ms=20.0, itl_ms=10.0, output_len=8)
LIMIT_MS, Q = 100.0, 0.99
SLOS = [parse_slo(f"ttft:p{Q * 100:g}={LIMIT_MS:g}")]
FIXED_START = 5.0
BASE = SearchSettings(start=FIXED_START, min_level=0.5, max_level=500.0)


@dataclass(frozen=True)
class Outcome:
    capacity: float
    levels: int
    runs: int
    requests: int
    seconds: float
    interval: tuple[float, float] | None = None
    by_fit: tuple[bool, bool] = (False, False)   # whether the fitted crossing set the interval's low / high end


class PointRuns:
    """One run per level, judged on its point p99 (what the other tools do); counts requests."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.rng = n, np.random.default_rng(seed)
        self.levels = 0
        self.requests = 0
        self.seconds = 0.0

    def p99(self, rate: float) -> float:
        self.levels += 1
        self.requests += self.n
        arrival, first, end = MODEL.run(rate, self.n, self.rng)
        self.seconds += float(end.max())
        return float(np.percentile((first - arrival) * 1000.0, 100 * Q))

    def throughput(self) -> float:
        """A run with every request sent at once: completions per second."""
        self.levels += 1
        self.requests += self.n
        _, _, end = MODEL.run(1e6, self.n, self.rng)
        self.seconds += float(end.max())
        return self.n / float(end.max())

    def outcome(self, capacity: float) -> Outcome:
        return Outcome(capacity, self.levels, self.levels, self.requests, self.seconds)


def auto_tune_like(n: int, seed: int) -> Outcome:
    runs = PointRuns(n, seed)
    top = runs.throughput()
    step = 0.05 * top
    rate = top
    while rate > step and runs.p99(rate) > LIMIT_MS:
        rate -= step
    return runs.outcome(rate)


def plain_bisection(n: int, seed: int, start: float = FIXED_START, rel_tol: float = 0.05) -> Outcome:
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
    return runs.outcome(below)


def simulated_probe(rng: np.random.Generator, model: QueueModel = MODEL) -> SaturationProbe:
    """What `servetune capacity`'s saturation probe would measure on the simulated server."""
    ends, sent = model.closed_loop_ends(PROBE_USERS, PROBE_SECONDS, rng)
    fastest = (model.prefill_ms / 4 + (model.output_len - 1) * model.itl_ms) / 1000.0
    return SaturationProbe(rate=completion_rate(list(ends)), min_latency_s=fastest, users=PROBE_USERS,
                           requests=sent, seconds=float(ends.max()))


def servetune(n: int, seed: int, *, probe: bool, looks_per_run: int) -> Outcome:
    settings = replace(BASE, looks_per_run=looks_per_run)
    requests, seconds = 0, 0.0
    if probe:
        found = simulated_probe(np.random.default_rng(100_000 + seed))
        settings = replace(settings, start=found.start("rate"))
        requests, seconds = found.requests, found.seconds
    result = search(simulated_measure(MODEL, SLOS, n, settings.alpha, seed, looks=settings.looks), SLOS, settings)
    est = estimate(result.levels)
    runs = sum(len(r.samples) for r in result.levels)
    return Outcome(est.capacity, len(result.levels), runs, requests + result.requests, seconds + result.seconds,
                   (est.low, est.high), (est.low_by == FIT, est.high_by == FIT))


METHODS: list[tuple[str, Callable[[int, int], Outcome]]] = [
    ("servetune before (fixed-length levels, start 5)", lambda n, s: servetune(n, s, probe=False, looks_per_run=1)),
    ("servetune + looks (start 5)", lambda n, s: servetune(n, s, probe=False, looks_per_run=5)),
    ("servetune + probe (fixed-length levels)", lambda n, s: servetune(n, s, probe=True, looks_per_run=1)),
    ("servetune (defaults: probe + looks + fitted interval)", lambda n, s: servetune(n, s, probe=True, looks_per_run=5)),
    ("plain bisection (point p99)", plain_bisection),
    ("auto_tune-style (lower the rate)", auto_tune_like),
]


def false_pass(console: Console, truth: float, n: int, levels: int) -> None:
    """How often a level at or above the capacity (its pooled p99 at or over the limit) is called
    met, with runs pooled as the search pools them: the verdict's error, which must stay at or
    under alpha / 2 (one side of the interval) with the looks as without."""
    table = Table(title=f"false passes: {levels} levels each, {n} requests a run, up to "
                        f"{BASE.max_runs_per_level} runs (alpha {BASE.alpha:g}: at most {BASE.alpha / 2:.1%})")
    for col in ("level", "looks a run", "called met", "called violated", "requests a level (mean)"):
        table.add_column(col, justify="right")
    for factor in (1.0, 1.05):
        for looks in (1, 5):
            st = replace(BASE, start=truth * factor, max_levels=1, looks_per_run=looks)
            judged = [search(simulated_measure(MODEL, SLOS, n, st.alpha, 50_000 + seed, looks=st.looks), SLOS,
                             st).levels[0] for seed in range(levels)]
            table.add_row(f"{factor:g} x truth", str(looks),
                          f"{np.mean([lv.verdict is Verdict.meets for lv in judged]):.1%}",
                          f"{np.mean([lv.verdict is Verdict.violates for lv in judged]):.1%}",
                          f"{np.mean([lv.requests for lv in judged]):,.0f}")
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--searches", type=int, default=50)
    p.add_argument("--requests", type=int, default=1000, help="requests a run")
    p.add_argument("--first-seed", type=int, default=0, help="searches use seeds first-seed, first-seed + 1, ...")
    p.add_argument("--false-pass", type=int, default=0, help="levels a false-pass cell simulates (0: none)")
    p.add_argument("--bursty", action="store_true", help="also servetune in bursty traffic with a p95 SLO")
    p.add_argument("--known-server", action="store_true",
                   help="also servetune's defaults on the queue model of capacity_known_server.py's server")
    args = p.parse_args()
    console = Console(width=200)
    truth = MODEL.true_crossing(Q, LIMIT_MS, args.requests, runs=300)
    console.print(f"simulated server: {MODEL.slots} slots, saturates at {MODEL.saturation_rate:.1f} req/s; "
                  f"SLO p99 TTFT <= {LIMIT_MS:g} ms holds up to {truth:.1f} req/s (truth, 300 runs a rate)")
    table = Table(title=f"{args.searches} searches each (seeds {args.first_seed} to {args.first_seed + args.searches - 1}), "
                        f"{args.requests} requests a run")
    for col in ("method", "levels (mean)", "runs (mean)", "requests (mean)", "wall min (median)", "|error| median",
                "|error| p95", "within 10 %", "interval covers truth", "set by fit (low/high)"):
        table.add_column(col, justify="right" if col != "method" else "left")
    for name, fn in METHODS:
        outs = [fn(args.requests, seed) for seed in range(args.first_seed, args.first_seed + args.searches)]
        err = np.array([abs(o.capacity / truth - 1) for o in outs])
        cover = (f"{np.mean([o.interval[0] <= truth <= o.interval[1] for o in outs if o.interval]):.0%}"
                 if outs[0].interval else "no interval")
        by_fit = (f"{np.mean([o.by_fit[0] for o in outs]):.0%} / {np.mean([o.by_fit[1] for o in outs]):.0%}"
                  if outs[0].interval else "—")
        table.add_row(name, f"{np.mean([o.levels for o in outs]):.1f}", f"{np.mean([o.runs for o in outs]):.1f}",
                      f"{np.mean([o.requests for o in outs]):,.0f}", f"{np.median([o.seconds for o in outs]) / 60:.1f}",
                      f"{np.median(err):.1%}", f"{np.quantile(err, 0.95):.1%}", f"{np.mean(err <= 0.10):.0%}", cover,
                      by_fit)
    console.print(table)
    if args.false_pass:
        false_pass(console, truth, args.requests, args.false_pass)
    if args.bursty:
        bursty(console, args.searches)
    if args.known_server:
        known_server(console, args.first_seed, args.searches)


def bursty(console: Console, searches: int) -> None:
    """servetune alone in the chat-bursty regime of the H200 study: gamma arrivals of shape 0.5,
    a p95 SLO, 200 requests a run, at most 8 levels and 2 runs a level."""
    n, shape, limit = 200, 0.5, 100.0
    slos = [parse_slo(f"ttft:p95={limit:g}")]
    truth = MODEL.true_crossing(0.95, limit, n, runs=300, seed=5, burstiness=shape)
    settings = SearchSettings(start=20.0, min_level=0.5, max_level=500.0, rel_tol=0.1, max_levels=8,
                              max_runs_per_level=2)
    ests = [estimate(search(simulated_measure(MODEL, slos, n, 0.05, seed, burstiness=shape, looks=settings.looks),
                            slos, settings).levels)
            for seed in range(searches)]
    err = np.array([abs(e.capacity / truth - 1) for e in ests])
    console.print(f"bursty (gamma shape {shape}), p95 TTFT <= {limit:g} ms, {n} requests a run: truth {truth:.1f} "
                  f"req/s; servetune over {searches} searches: |error| median {np.median(err):.1%}, "
                  f"within 10 % {np.mean(err <= 0.10):.0%}, interval covers truth "
                  f"{np.mean([e.low <= truth <= e.high for e in ests]):.0%}")


def known_server(console: Console, first_seed: int, searches: int) -> None:
    """`servetune capacity` with its defaults (the CLI's settings, the probe included) on the
    queue model of benchmarks/capacity_known_server.py's server: the time its requests take
    (simulated, no HTTP: over HTTP add 0.5 to 1 min), and what set the interval's ends."""
    slos = [parse_slo(f"ttft:p{known.Q * 100:g}={known.SLO_MS:g}")]
    truth = known.MODEL.true_crossing(known.Q, known.SLO_MS, known.RUN, runs=200)
    minutes, ests = [], []
    for seed in range(first_seed, first_seed + searches):
        found = simulated_probe(np.random.default_rng(100_000 + seed), known.MODEL)
        settings = settings_for("rate", start=found.start("rate"), max_level=None, alpha=0.05, rel_tol=0.05,
                                max_levels=12, max_runs_per_level=3)
        result = search(simulated_measure(known.MODEL, slos, known.RUN, settings.alpha, seed, looks=settings.looks),
                        slos, settings)
        minutes.append((found.seconds + result.seconds) / 60)
        ests.append(estimate(result.levels))
    err = np.array([abs(e.capacity / truth - 1) for e in ests])
    console.print(f"known server's queue model, p99 TTFT <= {known.SLO_MS:g} ms, {known.RUN} requests a run: truth "
                  f"{truth:.2f} req/s; servetune over {searches} searches: minutes measuring median "
                  f"{np.median(minutes):.2f}, p90 {np.quantile(minutes, 0.9):.2f}; |error| median {np.median(err):.1%}, "
                  f"p95 {np.quantile(err, 0.95):.1%}; interval covers truth "
                  f"{np.mean([e.low <= truth <= e.high for e in ests]):.0%}; set by fit (low / high) "
                  f"{np.mean([e.low_by == FIT for e in ests]):.0%} / {np.mean([e.high_by == FIT for e in ests]):.0%}")


if __name__ == "__main__":
    main()
