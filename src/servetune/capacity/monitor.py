"""Ending a load level early: once an SLO is surely lost, once an interim look decides the
level's verdict (sequential.py), or once the server cannot keep up.

Fed one finished request at a time (from the HTTP client's `should_stop` hook, or from a
simulation), it answers why the level should stop, or None to go on; `verdict` says what the
stop decided (every stop but a "met" look is a violation).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping

import numpy as np

from .sequential import InterimLooks, Looks
from .slo import Slo, Verdict, lost_after

# Over-saturation is called only on strong evidence (about 4 standard deviations), because a
# false call ends a level that might have met its SLOs and biases the capacity low.
_Z = 4.0
_MIN_FINISHED = 30        # no call before this many requests ended: the queue starts empty
_CHECK_EVERY = 8          # requests between saturation checks (each looks at the whole window)


class LevelMonitor:
    """`planned`: requests the level sends; `offered_rate`: req/s of an open loop (None: a
    closed loop, whose queue is bounded by its concurrency and cannot run away); `burstiness`:
    the shape of its gamma gaps (1: Poisson); `looks`: the level's interim looks (None: none),
    `prior` the values of its earlier runs (per metric, in the order sent) they pool with."""

    def __init__(self, slos: list[Slo], planned: int, alpha: float, offered_rate: float | None = None,
                 burstiness: float = 1.0, looks: Looks | None = None,
                 prior: Mapping[str, list[np.ndarray]] | None = None) -> None:
        self.looks = InterimLooks(slos, looks, planned, prior or {}) if looks and looks.sequential else None
        self.verdict: Verdict | None = None
        self.lost_at = {s: n for s in slos if (n := lost_after(s, planned, alpha)) is not None}
        self.planned, self.offered_rate = planned, offered_rate
        # Counts of a gamma renewal process vary 1 / shape times as much as Poisson ones: bursts
        # of shape 0.5 that a stable server absorbs must not look like a runaway queue.
        self.count_dispersion = max(1.0 / burstiness, 1.0)
        self.above = {s: 0 for s in self.lost_at}
        self.times: list[float] = []      # seconds from the first end, one per finished request
        self.started: list[int] = []      # requests released by then
        self.reason: str | None = None

    def observe(self, t_s: float, values_ms: Mapping[str, float], started: int, index: int | None = None,
                gaps_ms: np.ndarray | None = None) -> str | None:
        """A request ended at `t_s` (seconds, any origin) with these metric values (ms; a failed
        request: none) and these ITL gaps (ms), `started` requests released so far; `index`: its
        place in the order sent (default: the order they end). The reason to stop, or None."""
        if self.reason is not None:
            return self.reason
        self.times.append(t_s)
        self.started.append(started)
        if len(self.times) >= self.planned:
            return None   # the run's last request: nothing left to save, its end is the planned look
        if self.looks is not None:
            decided = self.looks.observe(len(self.times) if index is None else index, values_ms,
                                         started - len(self.times), gaps_ms)
            if decided is not None:
                self.verdict, self.reason = decided
                return self.reason
        for slo, lost_at in self.lost_at.items():
            value = values_ms.get(slo.metric)
            if value is not None and value > slo.limit_ms:
                self.above[slo] += 1
                if self.above[slo] >= lost_at:
                    self.verdict = Verdict.violates
                    self.reason = (f"lost {slo.key}: {self.above[slo]} of {self.planned} requests already "
                                   f"over {slo.limit_ms:g} ms")
                    return self.reason
        self.reason = self._saturated()
        if self.reason is not None:
            self.verdict = Verdict.violates
        return self.reason

    def _saturated(self) -> str | None:
        """Over the later half of the time so far: completions clearly below the offered rate,
        and requests in the system clearly growing (arrivals outpacing completions)."""
        n = len(self.times)
        if self.offered_rate is None or n < _MIN_FINISHED or n % _CHECK_EVERY:
            return None
        t0, t1 = self.times[0], self.times[-1]
        mid = (t0 + t1) / 2
        window = t1 - mid
        if window <= 0:
            return None
        i = bisect_left(self.times, mid)
        done = n - i
        arrived = self.started[-1] - self.started[i]
        expected = self.offered_rate * window
        slow = expected - done > _Z * math.sqrt(expected * self.count_dispersion)
        growing = arrived - done > _Z * math.sqrt(max(arrived + done, 1) * self.count_dispersion)
        if slow and growing:
            return (f"saturated: {done / window:.3g} req/s completed < {self.offered_rate:.3g} offered, "
                    f"{self.started[-1] - n} requests in the system and growing")
        return None
