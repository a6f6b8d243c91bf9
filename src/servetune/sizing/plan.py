"""The sizing arithmetic: replicas = ceil(target / capacity) at the capacity's point and at both
ends of its interval, the GPUs they take, and what they cost at the target load."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .capacities import ConfigCapacity

# A target that is a whole multiple of the capacity (3 x 12.5 req/s) needs exactly that many
# replicas: a quotient within this of a whole number is that number, not one more.
_WHOLE = 1e-9


def replicas_for(target_rps: float, capacity_rps: float) -> float:
    """Replicas of `capacity_rps` each that serve `target_rps`: inf where the capacity is 0."""
    if capacity_rps <= 0:
        return math.inf
    if not math.isfinite(capacity_rps):
        return 1.0
    quotient = target_rps / capacity_rps
    return float(max(math.ceil(quotient - _WHOLE * max(quotient, 1.0)), 1))


@dataclass(frozen=True)
class Sizing:
    """One config sized for one target."""

    capacity: ConfigCapacity
    target_rps: float
    replicas: float        # at the capacity's point (inf: the capacity is 0)
    replicas_low: float    # at the capacity's high end: the fewest the interval allows
    replicas_high: float   # at its low end: the most (inf: no level met the SLOs with confidence)
    price_per_gpu_hour: float | None

    @property
    def gpus(self) -> float:
        return self.replicas * self.capacity.gpus

    @property
    def usd_per_hour(self) -> float | None:
        if self.price_per_gpu_hour is None or not math.isfinite(self.gpus):
            return None
        return self.price_per_gpu_hour * self.gpus

    @property
    def output_tokens_per_s(self) -> float | None:
        """Output tokens per second the deployment serves at the target load."""
        per_request = self.capacity.output_tokens_per_request
        return None if per_request is None else self.target_rps * per_request

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        cost, tokens = self.usd_per_hour, self.output_tokens_per_s
        if cost is None or not tokens:
            return None
        return cost / (tokens * 3600.0) * 1e6

    @property
    def share_rps(self) -> float:
        """The load one replica takes when the target is dealt evenly."""
        return self.target_rps / self.replicas if math.isfinite(self.replicas) else math.inf

    def to_dict(self) -> dict[str, Any]:
        cap = self.capacity
        return {
            "config": cap.label, "gpus_per_replica": cap.gpus,
            "capacity": {"load": cap.load, "value": cap.value, "low": cap.low, "high": _num(cap.high),
                         "req_per_s": cap.value_rps, "req_per_s_low": cap.low_rps,
                         "req_per_s_high": _num(cap.high_rps),
                         "binding": cap.binding},
            "replicas": {"value": _num(self.replicas), "low": _num(self.replicas_low),
                         "high": _num(self.replicas_high)},
            "gpus": _num(self.gpus),
            "usd_per_hour": self.usd_per_hour,
            "output_tokens_per_s": self.output_tokens_per_s,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "joules_per_output_token": None,
            "energy": cap.energy_note,
        }


def size(capacity: ConfigCapacity, target_rps: float, price_per_gpu_hour: float | None) -> Sizing:
    """`capacity` sized for `target_rps`: the point from the capacity's point, the interval from
    its ends (the high end gives the fewest replicas)."""
    return Sizing(capacity, target_rps, replicas_for(target_rps, capacity.value_rps),
                  replicas_for(target_rps, capacity.high_rps), replicas_for(target_rps, capacity.low_rps),
                  price_per_gpu_hour)


def _num(x: float) -> float | None:
    """JSON has no infinity: an unbounded value is null."""
    return x if math.isfinite(x) else None
