"""The prefix-cache hits of a replayed trace on a KV pool of a given size: vLLM's block pool
replayed (the rule of vllm/v1/core/block_pool.py, 0.32) over the requests' client times.

A request takes its KV blocks (prompt and answer) when sent and frees them when it ends, last
block first: a full block, cached, to the tail of the free queue; its partial last block, cached
by nothing, to the head. New blocks come from the head, and a cached block taken there loses its
prefix. So a pool far from full at its peak still evicts once a run has taken more blocks than
it holds, and the hits fall below the implied ones (prefix.py: a cache that keeps everything).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ..records import RequestRecord
from .window import ReplayRequest

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


class PoolExhausted(Exception):
    """Running requests held every block of the pool: the server made a request wait or preempted
    one, which this replay does not follow."""


@dataclass(frozen=True)
class Timed:
    """A replayed request and its client times (ns): sent, blocks cached from, ended."""

    req: ReplayRequest
    sent: int
    cached: int
    ended: int


def timed_requests(records: Sequence[RequestRecord], requests: Sequence[ReplayRequest], *,
                   cached_from_first_token: bool) -> list[Timed]:
    """The measured requests sent (`records[i].index` into `requests`), in index order. A block is
    cached from the request's send, or (`cached_from_first_token`) from its first token; a request
    cut off holds its blocks to the run's end."""
    sent = sorted((r for r in records if not r.warmup and r.dispatch_ns), key=lambda r: r.index)
    last = max((r.end_ns or 0 for r in records), default=0) + 1
    out = []
    for r in sent:
        ended = r.end_ns or last
        cached = min(r.first_token_ns or last, ended) if cached_from_first_token else r.dispatch_ns
        out.append(Timed(requests[r.index], r.dispatch_ns, cached, ended))
    return out


def pool_hits(requests: Sequence[Timed], block_tokens: int, cache_block_size: int,
              pool_blocks: int | None) -> int:
    """Prefix-cache hit tokens of `requests` on a pool of `pool_blocks` KV blocks (None: unbounded);
    PoolExhausted where a request finds no free block."""
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
                    + [(t.ended, 1, i) for i, t in enumerate(requests)]
                    + [(t.sent, 2, i) for i, t in enumerate(requests)])
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
                if not free:
                    raise PoolExhausted(f"request {i} found none of the {pool_blocks} blocks free")
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
