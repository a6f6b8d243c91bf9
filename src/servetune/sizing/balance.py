"""A trace's requests dealt to N replicas as a load balancer deals them.

`round-robin`: request i to replica i mod N. `session`: a prefix-aware balancer, by the rule of
the cache-aware routers of SGLang and vLLM (their `--cache-threshold`). A later turn of a
conversation goes where its first turn went; a request whose longest prefix seen before covers
at least MATCH_SHARE of its blocks (a conversation's history, a document asked about again) goes
to a replica holding that prefix, so the reuse stays in one server's prefix cache; any other
request (a shared system prompt alone is too short a match) goes to the replica given the fewest
requests so far, as do ties.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ..errors import ServetuneError
from ..load.trace.window import Replay, ReplayRequest

Balance = Literal["round-robin", "session"]
BALANCES: tuple[Balance, ...] = ("round-robin", "session")
MATCH_SHARE = 0.5   # the share a cached prefix must cover (those routers' --cache-threshold)


def assign(replay: Replay, replicas: int, balance: Balance) -> list[int]:
    """The replica of each request of `replay`."""
    if replicas < 1:
        raise ServetuneError(f"replicas {replicas}: must be at least 1")
    if balance == "round-robin":
        return [i % replicas for i in range(len(replay.requests))]
    return _by_prefix(replay.requests, replicas)


def _by_prefix(requests: tuple[ReplayRequest, ...], replicas: int) -> list[int]:
    holders: dict[int, set[int]] = {}   # a prefix of blocks (its chained hash) -> replicas that hold it
    given = [0] * replicas
    owner: list[int] = []
    for r in requests:
        chain = _chained(r.hash_ids or ())
        if r.follows is not None:
            chosen = owner[r.follows]
        else:
            matched = next((n for n in range(len(chain), 0, -1) if chain[n - 1] in holders), 0)
            cached = matched > 0 and matched >= MATCH_SHARE * len(chain)
            candidates = sorted(holders[chain[matched - 1]]) if cached else range(replicas)
            chosen = min(candidates, key=lambda k: (given[k], k))
        for key in chain:
            holders.setdefault(key, set()).add(chosen)
        given[chosen] += 1
        owner.append(chosen)
    return owner


def _chained(blocks: tuple[int, ...]) -> list[int]:
    """One key per prefix of `blocks` (the first block, the first two, ...), each the hash of the
    one before and the next block: a prefix's key without storing the prefix."""
    keys, key = [], 0
    for block in blocks:
        key = hash((key, block))
        keys.append(key)
    return keys


def shares(replay: Replay, replicas: int, balance: Balance) -> list[Replay]:
    """Each replica's requests as a replay of its own (times kept). A later turn whose earlier
    turn went to another replica (round-robin) is sent at its recorded time: it cannot wait for
    an answer given elsewhere. The session balancer never splits a conversation."""
    owner = assign(replay, replicas, balance)
    out = []
    for k in range(replicas):
        picked = [i for i, o in enumerate(owner) if o == k]
        position = {i: n for n, i in enumerate(picked)}
        requests = []
        for i in picked:
            r = replay.requests[i]
            follows = position.get(r.follows) if r.follows is not None else None
            requests.append(r if follows == r.follows else
                            replace(r, follows=follows, delay_s=r.delay_s if follows is not None else 0.0))
        out.append(Replay(tuple(requests), replay.rows_read, replay.span_s))
    return out
