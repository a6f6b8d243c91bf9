"""The requests a Run replays: a trace's window or sample, rebased to start at 0 and scaled.

Selection streams the file (an Azure 2024 trace has millions of rows) and keeps only the
window; the last few selections are cached per file version, so the load levels of a capacity
search (one speed-up each) read the file once.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .formats import read_trace
from .rows import TraceError, TraceRow
from .spec import TraceSpec


@dataclass(frozen=True)
class ReplayRequest:
    """One request of a replay: `offset_s` after the Run's start at speed-up 1; `follows`: the
    position (in the replay) of the same session's previous turn, whose answer it waits for."""

    offset_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None = None
    follows: int | None = None
    delay_s: float = 0.0
    traffic_class: str | None = None


@dataclass(frozen=True)
class Replay:
    requests: tuple[ReplayRequest, ...]
    rows_read: int        # rows of the file (before the window)
    span_s: float         # the window's length in recorded seconds

    def offsets_s(self, speedup: float) -> list[float]:
        return [r.offset_s / speedup for r in self.requests]

    @property
    def classes(self) -> list[str]:
        """The request types the trace records, in the order they first arrive (none: [])."""
        return list(dict.fromkeys(r.traffic_class for r in self.requests if r.traffic_class is not None))


def _kept(session_key: str, sample: float, seed: int) -> bool:
    """A sample keeps whole sessions, decided by a hash of the session (stable across runs)."""
    if sample >= 1:
        return True
    digest = hashlib.blake2b(f"{seed}:{session_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < sample


def select(rows: Iterable[TraceRow], spec: TraceSpec, where: str) -> Replay:
    """The window and sample of `spec` out of `rows` (origin: the first row's time)."""
    origin: float | None = None
    end = spec.start_s + spec.duration_s if spec.duration_s is not None else float("inf")
    picked: list[tuple[float, int, TraceRow]] = []
    n = 0
    for n, row in enumerate(rows, 1):
        if origin is None:
            origin = row.t_s
        t = row.t_s - origin
        if not spec.start_s <= t < end:
            continue
        if not _kept(row.session if row.session is not None else f"row{n}", spec.sample, spec.seed):
            continue
        picked.append((t, n, row))
    if not picked:
        raise TraceError(f"{where}: no request in the window (start_s {spec.start_s:g}, duration_s "
                         f"{spec.duration_s if spec.duration_s is not None else 'all'}) of its {n} rows")
    picked.sort(key=lambda p: (p[0], p[1]))
    # A window cut to its first requests ends where the first request left out begins: the
    # recorded time those requests stand for (their rate is what a speed-up of them is sized by).
    cut_at: float | None = None
    if spec.max_requests is not None and len(picked) > spec.max_requests:
        cut_at = picked[spec.max_requests][0] - spec.start_s
        picked = picked[: spec.max_requests]
    scale = spec.token_scale
    last_turn: dict[str, int] = {}
    out: list[ReplayRequest] = []
    for i, (t, _, row) in enumerate(picked):
        follows = last_turn.get(row.session) if row.session is not None else None
        if row.session is not None:
            last_turn[row.session] = i
        out.append(ReplayRequest(offset_s=t - spec.start_s, input_len=max(round(row.input_len * scale), 1),
                                 output_len=max(round(row.output_len * scale), 1), hash_ids=row.hash_ids,
                                 follows=follows, delay_s=row.delay_s or 0.0, traffic_class=row.traffic_class))
    if cut_at is not None:
        span = cut_at
    else:
        span = spec.duration_s if spec.duration_s is not None else max(picked[-1][0] - spec.start_s, 0.0)
    return Replay(tuple(out), n, span)


def load_replay(spec: TraceSpec) -> Replay:
    """`select` of the spec's file, cached per file version (size, mtime) and selection."""
    try:
        st = spec.file.stat()
    except OSError as exc:
        raise TraceError(f"cannot read trace {spec.file}: {exc.strerror or exc}") from None
    # Speed-up only divides offsets: one cache entry serves every level of a capacity search.
    return _cached(spec.model_copy(update={"speedup": 1.0}), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _cached(spec: TraceSpec, size: int, mtime_ns: int) -> Replay:
    return select(read_trace(spec.file, spec.format), spec, str(spec.file))


def read_all(path: Path, fmt: str = "auto") -> list[TraceRow]:
    """Every row of a trace in memory (the `servetune trace` command's summary and cut)."""
    return list(read_trace(path, fmt))
