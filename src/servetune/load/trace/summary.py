"""What a trace holds: its size and span, arrival rate over time and bursts, length
distributions, the prefix reuse it implies; and which window of it to replay when a study must
fit an hour (the busiest, or the one most like the whole)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .prefix import implied_hits, per_request_hits
from .rows import TraceRow
from .window import ReplayRequest

WindowPick = Literal["representative", "peak"]


@dataclass(frozen=True)
class TraceSummary:
    rows: int
    duration_s: float
    mean_rate: float                     # req/s over the span
    peak_rate_1s: float                  # the busiest second's arrivals
    peak_rate_60s: float                 # the busiest minute's, per second
    gap_cv: float                        # coefficient of variation of inter-arrival gaps (Poisson: 1)
    input_len: dict[str, float]          # mean, p50, p90, p99, max
    output_len: dict[str, float]
    implied_hit_rate: float | None       # None: the trace has no prefix blocks
    requests_reusing: float | None       # share of requests with at least one cached block
    sessions: int
    per_minute: list[int]                # arrivals in each minute from the first row

    def rows_table(self) -> list[tuple[str, str]]:
        """(what, value) lines of the summary table."""
        def dist(d: dict[str, float]) -> str:
            return " / ".join(f"{d[k]:,.0f}" for k in ("mean", "p50", "p90", "p99", "max"))

        lines = [
            ("requests", f"{self.rows:,}"),
            ("span", f"{self.duration_s:,.1f} s ({self.duration_s / 60:.1f} min)"),
            ("mean arrival rate", f"{self.mean_rate:.3g} req/s"),
            ("busiest second / minute", f"{self.peak_rate_1s:.0f} req / {self.peak_rate_60s:.3g} req/s"),
            ("burstiness (gap CV, Poisson = 1)", f"{self.gap_cv:.2f}"),
            ("input tokens mean / p50 / p90 / p99 / max", dist(self.input_len)),
            ("output tokens mean / p50 / p90 / p99 / max", dist(self.output_len)),
        ]
        if self.implied_hit_rate is not None and self.requests_reusing is not None:
            lines += [("implied prefix-cache hit rate (tokens)", f"{self.implied_hit_rate:.1%}"),
                      ("requests reusing a cached prefix", f"{self.requests_reusing:.1%}")]
        if self.sessions:
            lines.append(("sessions (multi-turn)", f"{self.sessions:,}"))
        return lines


def _dist(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(values.mean()), "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99)),
            "max": float(values.max())}


def _peak(times: np.ndarray, width_s: float) -> float:
    """The most arrivals within any `width_s` seconds (a window starting at an arrival)."""
    ends = np.searchsorted(times, times + width_s, side="left")
    return float((ends - np.arange(len(times))).max())


def as_requests(rows: Sequence[TraceRow]) -> list[ReplayRequest]:
    t0 = min(r.t_s for r in rows)
    return [ReplayRequest(r.t_s - t0, r.input_len, r.output_len, r.hash_ids) for r in rows]


def summarize(rows: Sequence[TraceRow], block_tokens: int = 512, cache_block_size: int = 16) -> TraceSummary:
    if not rows:
        raise ValueError("no rows to summarize")
    times = np.sort(np.asarray([r.t_s for r in rows], dtype=np.float64))
    times -= times[0]
    span = float(times[-1])
    gaps = np.diff(times)
    has_blocks = any(r.hash_ids for r in rows)
    implied = requests_reusing = None
    if has_blocks:
        reqs = as_requests(rows)
        implied = implied_hits(reqs, block_tokens, cache_block_size).rate
        per_request = per_request_hits(reqs, block_tokens, cache_block_size)
        requests_reusing = sum(h > 0 for h in per_request) / len(per_request)
    return TraceSummary(
        rows=len(rows), duration_s=span, mean_rate=(len(rows) - 1) / span if span > 0 else math.inf,
        peak_rate_1s=_peak(times, 1.0), peak_rate_60s=_peak(times, 60.0) / 60.0,
        gap_cv=float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else 0.0,
        input_len=_dist(np.asarray([r.input_len for r in rows], dtype=np.float64)),
        output_len=_dist(np.asarray([r.output_len for r in rows], dtype=np.float64)),
        implied_hit_rate=implied, requests_reusing=requests_reusing,
        sessions=len({r.session for r in rows if r.session is not None}),
        per_minute=np.bincount((times // 60).astype(np.int64)).tolist(),
    )


def pick_window(rows: Sequence[TraceRow], duration_s: float, how: WindowPick = "representative",
                block_tokens: int = 512, cache_block_size: int = 16) -> float:
    """The start (s from the first row) of a `duration_s` window to replay: the busiest (`peak`),
    or the one whose arrival rate, mean prompt and implied hit rate are closest to the whole
    trace's (`representative`, relative differences summed). Candidates start every quarter window."""
    whole = summarize(rows, block_tokens, cache_block_size)
    if duration_s >= whole.duration_s:
        return 0.0
    reqs = sorted(as_requests(rows), key=lambda r: r.offset_s)
    offsets = np.asarray([r.offset_s for r in reqs])
    best_start, best_score = 0.0, math.inf
    for start in np.arange(0.0, whole.duration_s - duration_s + 1e-9, duration_s / 4):
        lo, hi = np.searchsorted(offsets, [start, start + duration_s])
        window = reqs[lo:hi]
        if len(window) < 2:
            continue
        rate = len(window) / duration_s
        if how == "peak":
            score = -rate
        else:
            mean_in = float(np.mean([r.input_len for r in window]))
            score = abs(rate / whole.mean_rate - 1) + abs(mean_in / whole.input_len["mean"] - 1)
            if whole.implied_hit_rate is not None:
                score += abs((implied_hits(window, block_tokens, cache_block_size).rate or 0.0)
                             - whole.implied_hit_rate)
        if score < best_score:
            best_start, best_score = float(start), score
    return best_start
