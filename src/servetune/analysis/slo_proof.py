"""Whether a config meets each SLO of a scenario, with the statistic's own uncertainty: met,
unproven or violated (SloState), never the verdict of one lucky or unlucky draw.

A percentile SLO (`p99_ttft_ms`, `median_tpot_ms`, ...) is judged on the per-request values of
every run of the config in that scenario, pooled over its boots in the order they were measured,
as a capacity level pools its runs (capacity/slo.py `judge`): the order-statistic interval of the
percentile, its sample shrunk to an effective size where slow requests come together (a queue
excursion, or one slow boot, whose requests sit next to each other in the pooled order); ITL
bootstrapped over requests. A mean, a standard deviation, a throughput, the duration or the
failures are one value per run: their interval is the config's metric interval (analysis/analysis.py:
boots nested in configs, under the study's boot variance once it is known; stats/). Where a run's
request records are missing (a store moved without its runs/), a percentile falls back to that
per-run interval of the runs' percentiles, and its basis says so.

Met: the interval lies inside the limit (a latency's upper end at or under it, a throughput's
lower end at or over it); violated: it lies wholly outside; unproven: it straddles the limit or
is unbounded (40 requests cannot show a p99 under anything). The interval is the study's
1 - alpha one, so "met" is one side of it: wrong with chance about alpha / 2 (exactly at most that for
independent requests; the effective size and the boot variance stand in for dependence).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..capacity.http import request_values
from ..capacity.slo import Slo, Verdict, class_slo, judge, requests_to_meet, verdict_of
from ..errors import ServetuneError
from ..load.classes import class_counts
from ..load.records import read_records
from ..study.metrics import CAPACITY, higher_is_better
from ..study.spec import StudySpec
from .types import Estimate, SloCheck, SloState

_STATE = {Verdict.meets: SloState.met, Verdict.violates: SloState.violated, Verdict.undecided: SloState.unproven}
_FileKey = tuple[str, int, int]   # path, mtime_ns, size: a records file as it is now


def percentile_slo(key: str, limit: float) -> Slo | None:
    """The study's SLO entry as a per-request percentile (a median is the p50); None for a mean or
    a per-run metric (a throughput, a standard deviation, the duration)."""
    return None if key.startswith("mean_") else class_slo(key, limit)


def class_label(scenario: str, traffic_class: str) -> str:
    """How a traffic class's SLO checks name where they were judged: `mixed/chat`."""
    return f"{scenario}/{traffic_class}"


def check_scenario(scenario: str, limits: Mapping[str, float], records: Sequence[Path] | None,
                   metrics: Mapping[str, Estimate], alpha: float) -> list[SloCheck]:
    """Every SLO of `scenario` judged on one config: `records` are its runs' request records in the
    order measured (None where any run's is missing), `metrics` its per-run metric estimates."""
    checks = []
    for key, limit in limits.items():
        slo = percentile_slo(key, limit)
        check = None
        if slo is not None and records:
            try:
                check = from_requests(scenario, key, slo, records, alpha)
            except (OSError, ServetuneError):   # unreadable records: the per-run interval instead
                check = None
        checks.append(check or _from_runs(scenario, key, limit, metrics.get(key)))
    return checks


def unprovable(spec: StudySpec) -> list[str]:
    """The percentile SLOs no config of this study can be shown to meet: even a finalist booted up
    to the re-validation cap, every replicate at its most, measures fewer requests of the scenario
    than the percentile's interval needs to be bounded with independent values. One line each,
    for `plan`; scenarios whose request count is not fixed (a duration, a sweep, a trace) are not
    judged here."""
    if spec.objective.metric == CAPACITY:
        return []
    out = []
    for sc in spec.scenarios:
        if sc.num_prompts is None or sc.duration_s is not None or sc.sweep_input_lens or sc.trace is not None:
            continue
        runs = spec.replicates.max * spec.revalidation.max_boots
        bounded = [(sc.name, sc.num_prompts, spec.objective.slo_for(sc.name))]
        if sc.classes:   # a class's percentile is judged on its own requests alone
            counts = class_counts(sc.classes, sc.num_prompts)
            bounded += [(class_label(sc.name, name), counts[name], limits)
                        for name, limits in spec.objective.class_slo_for(sc.name).items()]
        for where, per_run, limits in bounded:
            for key, limit in limits.items():
                slo = percentile_slo(key, limit)
                need = requests_to_meet(slo, spec.alpha) if slo is not None else None
                if need is not None and per_run * runs < need:
                    out.append(f"{where}: {key} can be shown met only on at least {need} requests pooled over a "
                               f"config's boots; at most {per_run * runs} here ({per_run} a run x "
                               f"{spec.replicates.max} replicate(s) x {spec.revalidation.max_boots} boots): no "
                               "winner can meet it (more num_prompts or replicates, or a lower percentile)")
    return out


def capacity_check(scenario: str, capacity: Estimate | None) -> SloCheck:
    """Under `maximize: capacity` the SLOs bound the capacity: each load level was judged with its
    own interval (capacity/), so a capacity above 0 is a level proven to meet every SLO."""
    value = capacity.estimate if capacity is not None else math.nan
    state = SloState.unproven if not math.isfinite(value) else SloState.met if value > 0 else SloState.violated
    n = capacity.n if capacity is not None else 0
    return SloCheck(scenario, "capacity", 0.0, value, math.nan, math.nan, state, "capacity", n)


def state_of(low: float, high: float, limit: float, *, upper: bool) -> SloState:
    """Where [low, high] lies against a ceiling (`upper`) or a floor."""
    verdict = verdict_of(low, high, limit) if upper else verdict_of(-high, -low, -limit)
    return _STATE[verdict]


def _from_runs(scenario: str, key: str, limit: float, estimate: Estimate | None) -> SloCheck:
    if estimate is None or not math.isfinite(estimate.estimate):
        return SloCheck(scenario, key, limit, math.nan, math.nan, math.nan, SloState.unproven, "", 0)
    low, high = estimate.low, estimate.high
    if estimate.censored or math.isnan(low) or math.isnan(high):   # a bound, or no interval: nothing proven
        low, high = -math.inf, math.inf
    state = state_of(low, high, limit, upper=not higher_is_better(key))
    return SloCheck(scenario, key, limit, estimate.estimate, low, high, state, "runs", estimate.n)


def from_requests(scenario: str, key: str, slo: Slo, records: Sequence[Path], alpha: float,
                   traffic_class: str | None = None) -> SloCheck:
    files = tuple(_file_key(p) for p in records)
    estimate, low, high, n, verdict = _judged(slo, alpha, files, traffic_class)
    return SloCheck(scenario, key, slo.limit_ms, estimate, low, high, _STATE[verdict], "requests", n)


def _file_key(path: Path) -> _FileKey:
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


# The search asks after every trial: a finished run's records never change, so each file is read
# once and each judgement (an ITL bootstrap takes a while) made once per set of files.
@functools.lru_cache(maxsize=256)
def _judged(slo: Slo, alpha: float, files: tuple[_FileKey, ...],
            traffic_class: str | None = None) -> tuple[float, float, float, int, Verdict]:
    values = [v for f in files for v in _request_values(f, traffic_class).get(slo.metric, [])]
    j = judge(slo, values, alpha)
    return j.estimate, j.low, j.high, j.n, j.verdict


@functools.lru_cache(maxsize=512)
def _request_values(file: _FileKey, traffic_class: str | None = None) -> dict[str, list[np.ndarray]]:
    """A records file's per-request values, a failed request's infinite (over every limit); of
    one traffic class's requests where one is named."""
    records = read_records(Path(file[0]))
    if traffic_class is not None:
        records = [r for r in records if r.traffic_class == traffic_class]
    return request_values(records, failed=True)
