"""How faithfully a Run replayed its trace, beside the send lateness every run reports
(load/metrics.py): answers of the length asked (the server's usage), and the prefix-cache hit
rate the replayed requests imply (an unbounded cache; and, where the server's KV pool is known,
that pool replayed) against the one the server's /metrics counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..dataset import RequestSpec
from ..metrics import succeeded
from ..records import RequestRecord
from .pool import PoolExhausted, pool_hits, timed_requests
from .prefix import implied_hits
from .spec import TraceSpec
from .window import ReplayRequest


def trace_fidelity(records: Sequence[RequestRecord], specs: Sequence[RequestSpec],
                   server_stats: Mapping[str, Any], trace: TraceSpec,
                   kv_cache_tokens: int | None = None) -> dict[str, Any]:
    """Summary fields of a trace Run: `output_tokens_checked/mismatched`, `prefix_hit_rate_implied`
    (over the requests sent, at the server's KV block size), `prefix_hit_rate_measured`, and with
    the server's KV pool (`kv_cache_tokens`, its boot log) `prefix_hit_rate_pool`: the hits of
    that pool replayed (pool.py), None where running requests would have held all of it."""
    ok = [r for r in records if not r.warmup and succeeded(r) and r.output_tokens is not None]
    sent = {r.index for r in records if not r.warmup and r.dispatch_ns}
    requests = [ReplayRequest(s.offset_s or 0.0, s.input_len or 0, s.output_len, s.hash_ids) for s in specs]
    implied = implied_hits([r for i, r in enumerate(requests) if i in sent], trace.block_tokens,
                           trace.cache_block_size)
    queries, hits = server_stats.get("prefix_cache_queries"), server_stats.get("prefix_cache_hits")
    out: dict[str, Any] = {
        "output_tokens_checked": len(ok),
        "output_tokens_mismatched": sum(1 for r in ok if r.output_tokens != r.output_len),
        "prefix_hit_rate_implied": implied.rate,
        "prefix_hit_rate_measured": hits / queries if queries and hits is not None else None,
        "trace_requests": len(specs),
        "trace_speedup": trace.speedup,
    }
    if kv_cache_tokens:   # unknown for a server servetune did not boot: the field stays out
        out["prefix_hit_rate_pool"] = _pool_rate(records, requests, trace, kv_cache_tokens, implied.queries)
    return out


def _pool_rate(records: Sequence[RequestRecord], requests: Sequence[ReplayRequest], trace: TraceSpec,
               kv_cache_tokens: int, queries: int) -> float | None:
    """Blocks cached from each request's send: vLLM's counts on the GPU runs matched this to the token."""
    timed = timed_requests(records, requests, cached_from_first_token=False)
    try:
        hits = pool_hits(timed, trace.block_tokens, trace.cache_block_size,
                         kv_cache_tokens // trace.cache_block_size)
    except PoolExhausted:
        return None
    return hits / queries if queries else None
