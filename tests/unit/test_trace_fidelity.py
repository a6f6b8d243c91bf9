"""load/trace/fidelity.py: a trace Run's expected prefix-cache hit rates, unbounded (implied) and
on the server's KV pool where its boot log gave one."""

from __future__ import annotations

from pathlib import Path

from servetune.load.dataset import RequestSpec
from servetune.load.records import RequestRecord
from servetune.load.trace.fidelity import trace_fidelity
from servetune.load.trace.spec import TraceSpec

TRACE = TraceSpec(path=Path("unused.jsonl"), block_size=32, cache_block_size=16)
# A (4 KV blocks of its two trace blocks), a filler of 2 blocks sharing nothing, then C, which
# shares A's 64 tokens; one after the other (sent, first token, end in ns).
SPECS = [RequestSpec(64, 1, hash_ids=(1, 2), offset_s=0.0), RequestSpec(32, 1, offset_s=1.0),
         RequestSpec(65, 1, hash_ids=(1, 2, 3), offset_s=2.0)]
TIMES = [(10, 11, 12), (20, 21, 22), (30, 31, 32)]
RECORDS = [RequestRecord(index=i, input_len=s.input_len or 0, output_len=1, scheduled_ns=t, dispatch_ns=t,
                         first_token_ns=f, end_ns=e, output_tokens=1, chunk_ns=[f])
           for i, (s, (t, f, e)) in enumerate(zip(SPECS, TIMES))]
QUERIES = 64 + 32 + 65
STATS = {"prefix_cache_queries": float(QUERIES), "prefix_cache_hits": 48.0}


def test_a_small_pool_expects_fewer_hits_than_the_unbounded_cache_and_exactly_those_counted_by_hand() -> None:
    # 5 blocks: A frees its blocks last first behind the one never used, [free, a3, a2, a1, a0];
    # the filler takes the unused one and a3, so C finds a0-a2: 48 of A's 64 tokens.
    got = trace_fidelity(RECORDS, SPECS, STATS, TRACE, kv_cache_tokens=5 * 16)
    assert got["prefix_hit_rate_implied"] == 64 / QUERIES
    assert got["prefix_hit_rate_pool"] == 48 / QUERIES == got["prefix_hit_rate_measured"]


def test_a_pool_that_holds_the_whole_run_expects_the_implied_hits() -> None:
    got = trace_fidelity(RECORDS, SPECS, STATS, TRACE, kv_cache_tokens=8 * 16)
    assert got["prefix_hit_rate_pool"] == got["prefix_hit_rate_implied"] == 64 / QUERIES


def test_without_the_pool_the_field_is_absent_and_with_too_small_a_pool_it_is_none() -> None:
    assert "prefix_hit_rate_pool" not in trace_fidelity(RECORDS, SPECS, STATS, TRACE)
    assert trace_fidelity(RECORDS, SPECS, STATS, TRACE, kv_cache_tokens=3 * 16)["prefix_hit_rate_pool"] is None
