"""How faithfully a Run replayed its trace, beside the send lateness every run reports
(load/metrics.py): answers of the length asked (the server's usage), and the prefix-cache hit
rate the replayed requests imply against the one the server's /metrics counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..dataset import RequestSpec
from ..metrics import succeeded
from ..records import RequestRecord
from .prefix import implied_hits
from .spec import TraceSpec
from .window import ReplayRequest


def trace_fidelity(records: Sequence[RequestRecord], specs: Sequence[RequestSpec],
                   server_stats: Mapping[str, Any], trace: TraceSpec) -> dict[str, Any]:
    """Summary fields of a trace Run: `output_tokens_checked/mismatched`, `prefix_hit_rate_implied`
    (over the requests sent, at the server's KV block size) and `prefix_hit_rate_measured`."""
    ok = [r for r in records if not r.warmup and succeeded(r) and r.output_tokens is not None]
    sent = {r.index for r in records if not r.warmup and r.dispatch_ns}
    replayed = [ReplayRequest(s.offset_s or 0.0, s.input_len or 0, s.output_len, s.hash_ids)
                for i, s in enumerate(specs) if i in sent]
    implied = implied_hits(replayed, trace.block_tokens, trace.cache_block_size)
    queries, hits = server_stats.get("prefix_cache_queries"), server_stats.get("prefix_cache_hits")
    return {
        "output_tokens_checked": len(ok),
        "output_tokens_mismatched": sum(1 for r in ok if r.output_tokens != r.output_len),
        "prefix_hit_rate_implied": implied.rate,
        "prefix_hit_rate_measured": hits / queries if queries and hits is not None else None,
        "trace_requests": len(specs),
        "trace_speedup": trace.speedup,
    }
