"""The prefix-cache hit rate a trace implies, counted the way vLLM counts its own.

vLLM's `prefix_cache_queries` adds every prompt token of a request it schedules and
`prefix_cache_hits` the tokens it found cached: whole KV blocks (`cache_block_size`) of a prefix
whose chain of blocks it computed before, at most the prompt less one token (the last is always
computed). The trace's blocks (`block_tokens` each, one hash id) say which prefixes repeat: a
request's leading blocks whose chain (the ids up to and including the block) an earlier request
held are in the cache, if it is large enough to keep everything (the implied rate is that
infinite cache's; a server that evicts, or that gets a request while the prefix it shares is
still being prefilled, hits less).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .window import ReplayRequest


@dataclass(frozen=True)
class Implied:
    hits: int        # tokens
    queries: int     # tokens

    @property
    def rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


def implied_hits(requests: Sequence[ReplayRequest], block_tokens: int, cache_block_size: int) -> Implied:
    """Over `requests` in their replay order, from an empty cache."""
    hits = per_request_hits(requests, block_tokens, cache_block_size)
    return Implied(sum(hits), sum(r.input_len for r in requests))


def per_request_hits(requests: Sequence[ReplayRequest], block_tokens: int, cache_block_size: int) -> list[int]:
    """Each request's cached prompt tokens, in replay (offset) order."""
    cached: dict[tuple[int, int], int] = {}  # (parent chain, hash id) -> tokens of that block cached
    chains: dict[tuple[int, int], int] = {}  # (parent chain, hash id) -> this chain's id
    out = []
    for req in sorted(requests, key=lambda r: r.offset_s):
        shared, parent, sharing = 0, -1, True
        for i, h in enumerate(req.hash_ids or ()):
            length = min(block_tokens, req.input_len - i * block_tokens)
            if length <= 0:
                break
            key = (parent, h)
            if sharing:
                have = cached.get(key, 0)
                shared += min(have, length)
                sharing = have >= length
            cached[key] = max(cached.get(key, 0), length)
            parent = chains.setdefault(key, len(chains))
        out.append(min(shared, req.input_len - 1) // cache_block_size * cache_block_size)
    return out
