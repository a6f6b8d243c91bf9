"""Why a trace replay's measured prefix-cache hit rate falls short of the implied one.

Each trace Run of a stored study (`runs/<run>.json` and its `.requests.jsonl`) recounted from its
per-request records, beside the hit rate vLLM's /metrics measured:

- implied: load/trace/prefix.py, every earlier request's blocks cached at once, in a cache that
  keeps everything (the run summary's `prefix_hit_rate_implied`).
- prefills finished: the same unbounded cache, but a block counts only where a request holding it
  had its first token before this request was sent. vLLM caches a block once it is scheduled, and
  a request looks the cache up when it is scheduled, after its send: this is the least an in-flight
  prefill can leave.
- block pool: vLLM's KV block pool replayed (load/trace/pool.py, the run summary's
  `prefix_hit_rate_pool` where the run knew its pool), `kv_tokens / cache_block_size` blocks
  (kv_tokens from the trial's boot log, "GPU KV cache size"). A request takes its blocks (prompt
  and answer) when sent and frees them when it ends; freed blocks keep their prefix until the pool
  hands them out again, so a pool far from full at its peak still evicts once a run has taken
  more blocks than it holds.

    .venv/bin/python benchmarks/prefix_cache_gap.py STUDY_DIR [--trace FILE] [--kv-tokens N]

STUDY_DIR: a study's folder (runs/, logs/), e.g. an unpacked docs/results/h200/*.tar.xz. --trace:
the trace file where the runs' recorded path is gone. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servetune.engine.bootfacts import parse_boot_facts  # noqa: E402
from servetune.load.records import RequestRecord  # noqa: E402
from servetune.load.trace.pool import pool_hits, timed_requests  # noqa: E402
from servetune.load.trace.prefix import implied_hits  # noqa: E402
from servetune.load.trace.spec import TraceSpec  # noqa: E402
from servetune.load.trace.window import load_replay  # noqa: E402


def kv_tokens_of(study: Path, run: str) -> int | None:
    """The KV pool in tokens from the boot log of the run's trial (`trialNNN-...`)."""
    for log in sorted((study / "logs").glob(f"{run.split('-')[0]}-*.log")):
        tokens = parse_boot_facts(log.read_text(errors="replace")).kv_cache_tokens
        if tokens:
            return tokens
    return None


@dataclass(frozen=True)
class Recount:
    """One run's prefix-cache hits (tokens) counted each way; `kv_taken`: tokens of the blocks the
    replayed pool handed out (those not found cached)."""

    run: str
    speedup: float
    requests: int
    queries: int
    implied: int
    finished: int
    pool: int | None
    kv_tokens: int | None
    kv_taken: int | None
    measured: float | None
    server_queries: float | None


def recount(study: Path, run_json: Path, trace: Path | None, kv_tokens: int | None) -> Recount:
    doc = json.loads(run_json.read_text())
    spec = TraceSpec.model_validate({**doc["scenario"]["trace"], **({"path": str(trace)} if trace else {})})
    replay = load_replay(spec).requests
    records = [RequestRecord.model_validate_json(line)
               for line in run_json.with_suffix(".requests.jsonl").read_text().splitlines() if line.strip()]
    timed = timed_requests(records, replay, cached_from_first_token=True)
    asis = timed_requests(records, replay, cached_from_first_token=False)
    bt, cbs = spec.block_tokens, spec.cache_block_size
    pool = kv_tokens or kv_tokens_of(study, run_json.stem)
    queries = sum(t.req.input_len for t in timed)
    kv_tokens_needed = sum(-(-(t.req.input_len + t.req.output_len - 1) // cbs) * cbs for t in timed)
    pooled = pool_hits(asis, bt, cbs, pool // cbs) if pool else None
    stats = doc["server_stats"]
    return Recount(run_json.stem, spec.speedup, len(timed), queries,
                   implied=implied_hits([t.req for t in timed], bt, cbs).hits, finished=pool_hits(timed, bt, cbs, None),
                   pool=pooled, kv_tokens=pool, kv_taken=kv_tokens_needed - pooled if pooled is not None else None,
                   measured=stats.get("prefix_cache_hits"), server_queries=stats.get("prefix_cache_queries"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path)
    ap.add_argument("--trace", type=Path, help="the trace file (default: the path each run recorded)")
    ap.add_argument("--kv-tokens", type=int, help="the KV pool in tokens (default: the trial's boot log)")
    args = ap.parse_args()
    runs = [p for p in sorted((args.study / "runs").glob("*.json"))
            if (json.loads(p.read_text()).get("scenario") or {}).get("trace") is not None]
    if not runs:
        sys.exit(f"{args.study}: no trace run under runs/")

    def pct(hits: float | None, queries: int) -> str:
        return f"{hits / queries:.2%} ({hits:,.0f})" if hits is not None else "-"

    print("| run | speed-up | requests | prompt tokens (server's) | implied | prefills finished "
          "| block pool | KV tokens taken / pool | measured |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        r = recount(args.study, run, args.trace, args.kv_tokens)
        q = r.queries
        print(f"| {r.run} | {r.speedup:.2f} | {r.requests} | {q:,} ({r.server_queries or 0:,.0f}) "
              f"| {pct(r.implied, q)} | {pct(r.finished, q)} | {pct(r.pool, q)} "
              f"| {r.kv_taken or 0:,} / {r.kv_tokens or 0:,} | {pct(r.measured, q)} |")


if __name__ == "__main__":
    main()
