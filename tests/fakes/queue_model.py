"""A server of known capacity, simulated without HTTP: the queue behind `fake_stream_server.py
--slots`, in pure Python.

`slots` requests are served at once, the rest wait in a FIFO queue; a request holds its slot from
the moment it gets one to its last token: a gamma prefill (shape 2, mean `prefill_ms`), then
`output_len - 1` gaps of `itl_ms`. So TTFT = queueing delay + prefill, and p99 TTFT rises with the
arrival rate until it runs away at slots / (prefill + decode time).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from servetune.capacity.levels import LevelSample, Measure
from servetune.capacity.monitor import LevelMonitor
from servetune.capacity.sequential import Looks
from servetune.capacity.slo import Slo

PREFILL_SHAPE = 2.0   # as fake_stream_server.py --slots draws it


@dataclass(frozen=True)
class QueueModel:
    slots: int = 16
    prefill_ms: float = 20.0
    itl_ms: float = 10.0
    output_len: int = 8

    @property
    def saturation_rate(self) -> float:
        """Requests per second the slots can serve at most (mean holding time)."""
        return self.slots / ((self.prefill_ms + (self.output_len - 1) * self.itl_ms) / 1000.0)

    def run(self, rate: float, n: int, rng: np.random.Generator,
            burstiness: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrival, first-token and end times (s) of `n` requests arriving at `rate` req/s
        (gamma inter-arrival times of shape `burstiness`; 1 = Poisson), the queue empty at 0."""
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), n)
        arrival = np.cumsum(gaps) - gaps[0]
        prefill = rng.gamma(PREFILL_SHAPE, self.prefill_ms / 1000.0 / PREFILL_SHAPE, n)
        decode = (self.output_len - 1) * self.itl_ms / 1000.0
        free = [0.0] * self.slots
        first = np.empty(n)
        for i in range(n):
            start = max(arrival[i], heapq.heappop(free))
            first[i] = start + prefill[i]
            heapq.heappush(free, first[i] + decode)
        return arrival, first, first + decode

    def closed_loop_ends(self, users: int, seconds: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """End times (s) of the requests `users` users (more than the slots) complete in a closed
        loop, each sending its next request as its last one ends, until `seconds` after the first
        end; and the requests sent. With more users than slots no slot is ever idle."""
        decode = (self.output_len - 1) * self.itl_ms / 1000.0
        free = [0.0] * self.slots
        ends: list[float] = []
        while not ends or max(ends[-self.slots:]) - min(ends[:self.slots]) < seconds:
            start = heapq.heappop(free)   # slots free up in time order: `start` never decreases
            end = start + rng.gamma(PREFILL_SHAPE, self.prefill_ms / 1000.0 / PREFILL_SHAPE) + decode
            heapq.heappush(free, end)
            ends.append(end)
        return np.sort(ends), len(ends) + users - self.slots

    def pooled_ttft_ms(self, rate: float, n: int, runs: int, seed: int, burstiness: float = 1.0) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return np.concatenate([(lambda a, f, _e: (f - a) * 1000.0)(*self.run(rate, n, rng, burstiness))
                               for _ in range(runs)])

    def true_crossing(self, q: float, limit_ms: float, n: int, runs: int = 200, seed: int = 12345,
                      burstiness: float = 1.0) -> float:
        """The rate at which the q-quantile of TTFT over runs of `n` requests equals `limit_ms`
        (bisection on a long simulation with common random numbers)."""
        lo, hi = 0.2 * self.saturation_rate, self.saturation_rate
        for _ in range(16):
            mid = (lo + hi) / 2
            if np.quantile(self.pooled_ttft_ms(mid, n, runs, seed, burstiness), q) > limit_ms:
                hi = mid
            else:
                lo = mid
        return (lo + hi) / 2


def simulated_measure(model: QueueModel, slos: list[Slo], n: int, alpha: float, seed: int,
                      early_stop: bool = True, burstiness: float = 1.0, looks: Looks | None = None) -> Measure:
    """`measure(rate, prior)` over the simulated queue: `n` requests a run (gamma gaps of shape
    `burstiness`), fed to the same LevelMonitor the HTTP measurement uses (in the order they
    end, with `looks` pooled with the level's `prior` runs), so a run ends where a real one would."""
    rng = np.random.default_rng(seed)
    itl_gaps = np.full(model.output_len - 1, model.itl_ms)

    def measure(rate: float, prior: list[LevelSample]) -> LevelSample:
        arrival, first, end = model.run(rate, n, rng, burstiness)
        ttft, e2el = (first - arrival) * 1000.0, (end - arrival) * 1000.0
        pooled = {m: [v for smp in prior for v in smp.values.get(m, [])] for m in ("ttft", "e2el", "tpot", "itl")}
        monitor = LevelMonitor(slos, n, looks.planned_alpha if looks else alpha, offered_rate=rate,
                               burstiness=burstiness, looks=looks, prior=pooled)
        done: list[int] = []
        stopped = None
        for i in np.argsort(end, kind="stable"):
            done.append(int(i))
            values = {"ttft": ttft[i], "e2el": e2el[i], "tpot": model.itl_ms}
            started = int(np.searchsorted(arrival, end[i], "right"))
            if early_stop and (stopped := monitor.observe(end[i], values, started, index=int(i), gaps_ms=itl_gaps)):
                break
        sent = int(np.searchsorted(arrival, end[done[-1]], "right")) if stopped else n
        done.sort()   # judged in the order sent, as the records are
        return LevelSample(rate, {"ttft": [ttft[done]], "e2el": [e2el[done]],
                                  "tpot": [np.full(len(done), model.itl_ms)],
                                  "itl": [itl_gaps for _ in done]}, sent, len(done), stopped,
                           stopped_verdict=monitor.verdict if stopped else None, seconds=float(end[done].max()))

    return measure
