"""Why a trace replay's measured prefix-cache hit rate falls short of the implied one.

Each trace Run of a stored study (`runs/<run>.json` and its `.requests.jsonl`) recounted from its
per-request records, beside the hit rate vLLM's /metrics measured:

- implied: load/trace/prefix.py, every earlier request's blocks cached at once, in a cache that
  keeps everything (the run summary's `prefix_hit_rate_implied`).
- prefills finished: the same unbounded cache, but a block counts only where a request holding it
  had its first token before this request was sent. vLLM caches a block once it is scheduled, and
  a request looks the cache up when it is scheduled, after its send: this is the least an in-flight
  prefill can leave.
- block pool: vLLM's KV block pool replayed (the rule of vllm/v1/core/block_pool.py, 0.32), `kv_tokens /
  cache_block_size` blocks (kv_tokens from the trial's boot log, "GPU KV cache size"). A request
  takes its blocks (prompt and answer) when sent and frees them when it ends, last block first: a
  full block, cached, to the tail of the free queue; its partial last block, cached by nothing, to
  the head. New blocks come from the head, and a cached block taken there loses its prefix. So a
  pool far from full at its peak still evicts once a run has taken more blocks than it holds.

    .venv/bin/python benchmarks/prefix_cache_gap.py STUDY_DIR [--trace FILE] [--kv-tokens N]

STUDY_DIR: a study's folder (runs/, logs/), e.g. an unpacked docs/results/h200/*.tar.xz. --trace:
the trace file where the runs' recorded path is gone. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servetune.engine.bootfacts import parse_boot_facts  # noqa: E402
from servetune.load.records import RequestRecord  # noqa: E402
from servetune.load.trace.prefix import implied_hits  # noqa: E402
from servetune.load.trace.spec import TraceSpec  # noqa: E402
from servetune.load.trace.window import ReplayRequest, load_replay  # noqa: E402

# (the hash ids up to a trace block: its chain, KV block within it); a block of the request's own
# tokens: ((-1, request), its position), which nothing else holds.
BlockKey = tuple[tuple[int, ...], int]


def kv_block_keys(req: ReplayRequest, block_tokens: int, cache_block_size: int) -> list[BlockKey]:
    """The keys of the request's full KV blocks that lie in its trace blocks (shareable), in order."""
    keys: list[BlockKey] = []
    hash_ids = req.hash_ids or ()
    for i in range(len(hash_ids)):
        length = min(block_tokens, req.input_len - i * block_tokens)
        if length <= 0:
            break
        keys += [(hash_ids[: i + 1], j) for j in range(length // cache_block_size)]
    return keys


@dataclass
class Timed:
    """A replayed request and its client times (ns): sent, blocks cached from, ended."""

    req: ReplayRequest
    sent: int
    cached: int
    ended: int


def pool_hits(requests: Sequence[Timed], block_tokens: int, cache_block_size: int,
              pool_blocks: int | None) -> int:
    """Prefix-cache hit tokens of `requests` on a pool of `pool_blocks` KV blocks (None: unbounded)."""
    free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(pool_blocks or 0))
    key_of: dict[int, BlockKey] = {}
    hashed: set[int] = set()   # blocks with a hash: those in key_of and duplicates of their keys
    block_of: dict[BlockKey, int] = {}
    refs: dict[int, int] = {}
    held: dict[int, list[int]] = {}
    pending: dict[int, list[tuple[int, BlockKey]]] = {}
    fresh = pool_blocks or 0   # block ids past the pool: an unbounded pool's new blocks

    def register(new: list[tuple[int, BlockKey]]) -> None:
        for block, key in new:
            hashed.add(block)
            if key not in block_of:
                key_of[block], block_of[key] = key, block

    # At equal times: caching, then ends, then sends (a request's caching comes after its own send).
    events = sorted([(t.cached, 0, i) for i, t in enumerate(requests) if t.cached > t.sent]
                    + [(t.ended, 1, i) for i, t in enumerate(requests)] + [(t.sent, 2, i) for i, t in enumerate(requests)])
    hits = 0
    for _, kind, i in events:
        t = requests[i]
        if kind == 0:
            register(pending.pop(i))
            continue
        if kind == 1:
            for block in reversed(held.pop(i)):
                refs[block] -= 1
                if refs[block] == 0:
                    free[block] = None
                    if block not in hashed:           # nothing to keep: the first to be taken again
                        free.move_to_end(block, last=False)
            continue
        keys = kv_block_keys(t.req, block_tokens, cache_block_size)
        found: list[int] = []
        for key in keys[: (t.req.input_len - 1) // cache_block_size]:  # the last token is always computed
            if key not in block_of:
                break
            found.append(block_of[key])
        hits += len(found) * cache_block_size
        for block in found:
            if refs.get(block, 0) == 0:
                free.pop(block, None)
            refs[block] = refs.get(block, 0) + 1
        new: list[tuple[int, BlockKey]] = []
        blocks = list(found)
        kv_len = t.req.input_len + t.req.output_len - 1   # the last answer token is never fed back
        for n in range(len(found), -(-kv_len // cache_block_size)):
            if pool_blocks is None:
                block, fresh = fresh, fresh + 1
            else:
                block, _ = free.popitem(last=False)   # the least recently freed block
                hashed.discard(block)
                evicted = key_of.pop(block, None)
                if evicted is not None:
                    del block_of[evicted]
            refs[block] = 1
            blocks.append(block)
            if n < len(keys):
                new.append((block, keys[n]))
            elif (n + 1) * cache_block_size <= kv_len:       # vLLM caches every full block
                new.append((block, ((-1, i), n)))
        held[i] = blocks
        if t.cached > t.sent:
            pending[i] = new
        else:
            register(new)
    return hits


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
    sent = sorted((r for r in records if not r.warmup and r.dispatch_ns), key=lambda r: r.index)
    last = max((r.end_ns or 0) for r in records) + 1   # a request cut off holds its blocks to the end
    timed = [Timed(replay[r.index], r.dispatch_ns, min(r.first_token_ns or last, r.end_ns or last), r.end_ns or last)
             for r in sent]
    asis = [Timed(t.req, t.sent, t.sent, t.ended) for t in timed]
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
