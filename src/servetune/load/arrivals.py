"""Arrival processes: when each request of a Run is meant to be sent.

- closed loop: `concurrency` slots, each sends its next request when the previous one ends
  (no schedule: `offsets` is None);
- open loop: gaps drawn from a gamma distribution with shape `burstiness` and mean 1/rate
  (Poisson when burstiness == 1), rescaled so n requests span n/rate seconds exactly, as
  `vllm bench serve` does (keeps throughput comparable across seeds);
- all at once: rate == inf, every offset 0.
An open loop may also be capped by `concurrency` (requests then wait for a free slot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .scenario import Scenario


@dataclass(frozen=True)
class Plan:
    """Offsets in seconds from the start (None: closed loop) and the concurrency cap."""

    offsets: np.ndarray | None
    concurrency: int | None
    rate: float | None          # requested req/s (None: closed loop; inf: all at once)

    @property
    def kind(self) -> str:
        if self.offsets is None:
            return "closed"
        return "all-at-once" if self.rate == math.inf else "open"


def open_loop_offsets(n: int, rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    if n <= 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    cum = np.cumsum(gaps)
    offsets: np.ndarray = cum * ((n / rate) / cum[-1])
    return offsets


def trace_plan(offsets_s: list[float], speedup: float, concurrency: int | None) -> Plan:
    """A trace's recorded arrivals, `speedup` times as fast; `rate`: their mean req/s."""
    offsets = np.asarray(offsets_s, dtype=np.float64) / speedup
    span = float(offsets[-1] - offsets[0]) if len(offsets) > 1 else 0.0
    return Plan(offsets, concurrency, (len(offsets) - 1) / span if span > 0 else math.inf)


def plan(scenario: Scenario, n: int, rng: np.random.Generator) -> Plan:
    if scenario.rate is None:
        return Plan(None, scenario.concurrency or 1, None)
    return Plan(open_loop_offsets(n, scenario.rate, scenario.burstiness, rng), scenario.concurrency, scenario.rate)
