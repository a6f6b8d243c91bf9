"""Traffic classes inside one run: which class each request of a mixed scenario belongs to (or
the request type a trace records), and each class's metrics apart (the same `vllm bench serve`
definitions, on its own requests).

A class's part of the run is its share of the requests, or its rate over the sum of the rates:
the counts are fixed by largest remainder (so 20 requests at shares 0.75/0.25 are exactly 15 and
5, not a binomial draw) and their order shuffled by the scenario's seed. Rates keep one arrival
stream at their sum: merged Poisson streams are one Poisson stream whose requests are each class's
in proportion to its rate.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import metrics
from .records import RequestRecord
from .scenario import Scenario, TrafficClass
from .trace.window import load_replay


def class_counts(classes: dict[str, TrafficClass], n: int) -> dict[str, int]:
    """How many of `n` requests each class gets: its weight's part, rounded by largest remainder."""
    weights = {name: (tc.share if tc.share is not None else tc.rate) or 0.0 for name, tc in classes.items()}
    total = math.fsum(weights.values())
    exact = {name: n * w / total for name, w in weights.items()}
    counts = {name: math.floor(x) for name, x in exact.items()}
    by_remainder = sorted(exact, key=lambda name: (counts[name] - exact[name], list(exact).index(name)))
    for name in by_remainder[: n - sum(counts.values())]:
        counts[name] += 1
    return counts


def class_order(scenario: Scenario, n: int, rng: np.random.Generator) -> list[str]:
    """The class of each of the first `n` requests of a mixed scenario, in the order sent."""
    assert scenario.classes is not None
    order = [name for name, k in class_counts(scenario.classes, n).items() for _ in range(k)]
    shuffled: list[str] = [order[i] for i in rng.permutation(len(order))]
    return shuffled


def class_names(scenario: Scenario) -> list[str]:
    """The classes a scenario's requests carry: its `classes`, or the request types its trace records."""
    if scenario.classes is not None:
        return list(scenario.classes)
    if scenario.trace is not None:
        return load_replay(scenario.trace).classes
    return []


def by_class(records: Sequence[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """The measured records of each class, in the order given; records without a class left out."""
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.traffic_class is not None and not r.warmup:
            out[r.traffic_class].append(r)
    return dict(out)


def class_summaries(records: Sequence[RequestRecord], duration_s: float,
                    percentiles: Sequence[float]) -> dict[str, dict[str, Any]]:
    """Each class's summary (metrics.summarize on its own requests over the run's duration): its
    TTFT, TPOT, ITL and E2EL as `vllm bench serve` defines them, its throughputs over the whole run."""
    return {name: metrics.summarize(recs, duration_s, percentiles)
            for name, recs in sorted(by_class(records).items())}
