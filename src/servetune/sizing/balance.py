"""A trace's requests dealt to N replicas as a load balancer deals them: `round-robin` (request i
to replica i mod N), or `session` (every turn of a conversation, and requests sharing a prompt's
first prefix block, to the same replica, keys dealt round-robin in order of first arrival: the
prefix reuse stays on one server's cache)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from .. import errors
from ..load.trace.window import Replay, ReplayRequest

Balance = Literal["round-robin", "session"]
BALANCES: tuple[Balance, ...] = ("round-robin", "session")


def _session_keys(requests: tuple[ReplayRequest, ...]) -> list[tuple[str, int]]:
    """Per request, what the session balancer routes by: its conversation's first turn, else
    its first prefix block, else the request alone."""
    keys: list[tuple[str, int]] = []
    for i, r in enumerate(requests):
        if r.follows is not None:
            keys.append(keys[r.follows])
        elif r.hash_ids:
            keys.append(("prefix", r.hash_ids[0]))
        else:
            keys.append(("request", i))
    return keys


def assign(replay: Replay, replicas: int, balance: Balance) -> list[int]:
    """The replica of each request of `replay`."""
    if replicas < 1:
        raise errors.ServetuneError(f"replicas {replicas}: must be at least 1")
    if balance == "round-robin":
        return [i % replicas for i in range(len(replay.requests))]
    order: dict[tuple[str, int], int] = {}
    return [order.setdefault(key, len(order)) % replicas for key in _session_keys(replay.requests)]


def shares(replay: Replay, replicas: int, balance: Balance) -> list[Replay]:
    """Each replica's requests as a replay of its own (times kept). A later turn whose earlier
    turn went to another replica is sent at its recorded time (it cannot wait for an answer
    given elsewhere); the session balancer never splits a conversation."""
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
