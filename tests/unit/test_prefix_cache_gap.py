"""benchmarks/prefix_cache_gap.py: vLLM's block pool replayed on constructed requests (eviction of
freed blocks, last block first; blocks cached only from a request's first token), and a stored
trace Run recounted from its files."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.prefix_cache_gap import Timed, kv_tokens_of, pool_hits, recount
from servetune.load.records import RequestRecord
from servetune.load.trace.prefix import implied_hits
from servetune.load.trace.window import ReplayRequest

BLOCK, KV = 32, 16   # trace block, KV block (tokens)
A = ReplayRequest(0.0, 64, 1, (1, 2))          # 4 KV blocks, all of its two trace blocks
C = ReplayRequest(0.0, 65, 1, (1, 2, 3))       # shares A's 64 tokens


def at(req: ReplayRequest, sent: int, ended: int, cached: int | None = None) -> Timed:
    return Timed(req, sent, sent if cached is None else cached, ended)


def test_an_unbounded_pool_with_blocks_cached_when_sent_counts_what_the_implied_rate_counts() -> None:
    reqs = [A, C, ReplayRequest(0.0, 100, 3, (1, 9, 3)), ReplayRequest(0.0, 40, 2, (1,)),
            ReplayRequest(0.0, 70, 1, (1, 2, 3)), ReplayRequest(0.0, 20, 1, None), A]
    timed = [at(r, i, 100) for i, r in enumerate(reqs)]
    hits = pool_hits(timed, BLOCK, KV, None)
    assert hits == implied_hits(reqs, BLOCK, KV).hits == 64 + 32 + 32 + 64 + 48   # A again: its last token computed


def test_a_freed_block_stays_cached_until_the_pool_hands_it_out_again_last_block_first() -> None:
    # A's 4 blocks freed (last first) behind the one block never used: B's first block is that one.
    one = ReplayRequest(0.0, 16, 1, None)       # 1 block
    two = ReplayRequest(0.0, 32, 1, None)       # 2 blocks: the second is A's last
    assert pool_hits([at(A, 0, 1), at(one, 2, 3), at(C, 4, 5)], BLOCK, KV, 5) == 64
    assert pool_hits([at(A, 0, 1), at(two, 2, 3), at(C, 4, 5)], BLOCK, KV, 5) == 48
    assert pool_hits([at(A, 0, 1), at(two, 2, 3), at(C, 4, 5)], BLOCK, KV, None) == 64


def test_a_freed_block_that_caches_nothing_is_handed_out_again_first() -> None:
    # P's partial last block (8 tokens) goes back to the head of the free queue, ahead of S's
    # cached block: Q's one block is that one, and T still finds S's.
    s = ReplayRequest(0.0, 16, 1, (5,))
    p = ReplayRequest(0.0, 40, 1, (1, 2))
    q = ReplayRequest(0.0, 16, 1, None)
    t = ReplayRequest(0.0, 17, 1, (5,))
    assert pool_hits([at(s, 0, 1), at(p, 2, 3), at(q, 4, 5), at(t, 6, 7)], BLOCK, KV, 4) == 16


def test_a_cached_block_a_running_request_holds_is_not_handed_out() -> None:
    # A's blocks freed first, then X's; A again takes A's blocks back (and re-caches A's last one,
    # evicted for its own last token) and holds them while B takes two blocks: X's, not A's.
    x = ReplayRequest(0.0, 64, 1, None)
    b = ReplayRequest(0.0, 32, 1, None)
    timed = [at(A, 0, 2), at(x, 1, 3), at(A, 4, 20), at(b, 5, 6), at(C, 7, 8)]
    assert pool_hits(timed, BLOCK, KV, 8) == 48 + 64


def test_a_request_sent_before_the_holder_s_first_token_hits_nothing_of_it() -> None:
    assert pool_hits([at(A, 0, 20, cached=10), at(C, 5, 30)], BLOCK, KV, None) == 0
    assert pool_hits([at(A, 0, 20, cached=10), at(C, 15, 30)], BLOCK, KV, None) == 64
    assert pool_hits([at(A, 0, 20), at(C, 5, 30)], BLOCK, KV, None) == 64


def test_a_stored_run_is_recounted_from_its_files_and_its_boot_log(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [(0, 64, [1, 2]), (1000, 65, [1, 2, 3]), (2000, 32, None), (3000, 65, [1, 2, 3])]
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1,
                                         **({"hash_ids": h} if h else {})}) + "\n" for t, n, h in rows))
    (tmp_path / "runs").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "trial001-baseline.log").write_text(
        "(EngineCore pid=1) INFO 12-05 11:05:48 [kv_cache_utils.py:2177] GPU KV cache size: 80 tokens\n")
    run = tmp_path / "runs" / "trial001-trace-L01.json"
    trace_spec = {"path": str(trace), "block_size": BLOCK, "cache_block_size": KV}
    run.write_text(json.dumps({"scenario": {"trace": trace_spec},
                               "server_stats": {"prefix_cache_hits": 112.0, "prefix_cache_queries": 226.0}}))
    # Request 1 is sent before request 0's first token; request 2 then evicts request 0's last block.
    times = [(10, 30, 40), (20, 50, 60), (70, 80, 90), (100, 110, 120)]
    run.with_suffix(".requests.jsonl").write_text("".join(
        RequestRecord(index=i, input_len=rows[i][1], output_len=1, scheduled_ns=s, dispatch_ns=s,
                      first_token_ns=f, end_ns=e).model_dump_json() + "\n" for i, (s, f, e) in enumerate(times)))
    assert kv_tokens_of(tmp_path, run.stem) == 80
    got = recount(tmp_path, run, None, None)
    assert (got.queries, got.implied, got.finished, got.pool, got.kv_tokens, got.measured) == \
        (226, 128, 64, 112, 80, 112.0)
