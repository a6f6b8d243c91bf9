"""A mixed scenario's traffic classes judged apart within the same runs: each class's latencies
with their intervals, and its own SLOs met, unproven or violated, so "short requests wait behind
long ones" is a measured verdict.

A class's values are its own requests of every run of the config, pooled over its boots in the
order measured (the request records keep each request's class: load/classes.py), judged as
slo_proof judges a scenario's percentiles: capacity/slo.py's order-statistic interval with its
effective size, ITL bootstrapped over requests; a class's mean gets a t-interval over its requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..capacity.slo import Slo, class_slo
from ..errors import ServetuneError
from .slo_proof import class_label, from_requests
from .types import ClassResult, ClassStat, SloCheck, SloState

# The statistics every class's row shows (with the study's SLO keys: `vllm bench serve` names).
TABLE_KEYS = ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p50_e2el_ms")


def class_results(scenario: str, classes: Sequence[str], limits: Mapping[str, Mapping[str, float]],
                  records: Sequence[Path] | None, alpha: float) -> list[ClassResult]:
    """Each class of `scenario` on one config: `records` are its runs' request records in the
    order measured (None where any run's is missing: every statistic and SLO is then unproven)."""
    return [ClassResult(name, _stats(scenario, name, records, alpha),
                        _checks(scenario, name, limits.get(name, {}), records, alpha)) for name in classes]


def _stats(scenario: str, name: str, records: Sequence[Path] | None, alpha: float) -> dict[str, ClassStat]:
    out = {}
    for key in TABLE_KEYS:
        slo = class_slo(key, math.inf)
        assert slo is not None
        check = _judged(scenario, name, key, slo, records, alpha)
        out[key] = ClassStat(check.estimate, check.low, check.high, check.n)
    return out


def _checks(scenario: str, name: str, limits: Mapping[str, float], records: Sequence[Path] | None,
            alpha: float) -> list[SloCheck]:
    checks = []
    for key, limit in limits.items():
        slo = class_slo(key, limit)
        if slo is not None:   # the study file's check let nothing else through
            checks.append(_judged(scenario, name, key, slo, records, alpha))
    return checks


def _judged(scenario: str, name: str, key: str, slo: Slo, records: Sequence[Path] | None,
            alpha: float) -> SloCheck:
    label = class_label(scenario, name)
    if records:
        try:
            return from_requests(label, key, slo, records, alpha, traffic_class=name)
        except (OSError, ServetuneError):
            pass
    return SloCheck(label, key, slo.limit_ms, math.nan, math.nan, math.nan, SloState.unproven, "", 0)
