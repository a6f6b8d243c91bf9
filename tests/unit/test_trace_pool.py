"""load/trace/pool.py: vLLM's block pool replayed on constructed requests (eviction of freed
blocks, last block first; blocks cached only from a request's first token)."""

from __future__ import annotations

import pytest

from servetune.load.trace.pool import PoolExhausted, Timed, pool_hits
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


def test_a_pool_that_running_requests_fill_says_so() -> None:
    with pytest.raises(PoolExhausted):
        pool_hits([at(A, 0, 1)], BLOCK, KV, 3)   # A alone needs 4 blocks
