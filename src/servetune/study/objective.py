"""The objective: one number per replicate that says how much better than the baseline a Config is.

For each scenario s and replicate r, gain[s, r] = metric[s, r] / mean(baseline metric[s]) when
maximising, mean(baseline metric[s]) / metric[s, r] when minimising, so that > 1 is always better
and the baseline's own samples sit around 1.0. Across scenarios:

- `weighted`:   sum_s w_s * gain[s, r] / sum_s w_s
- `worst_case`: min_s gain[s, r]  (scenarios with weight 0 are left out of both)

SLOs bound scenario metrics (`*_ms`, duration, failed: upper limits; throughputs: lower limits).
A config meets one only when that statistic's interval, pooled over the config's boots, lies
inside the limit (analysis/slo_proof.py: met, unproven or violated); `slo_violations` here checks a
single value against the limits, as the capacity objective's are checked.

With `maximize: capacity` the SLOs are what the capacity is measured against (each scenario's
highest load level at which all of them hold, capacity/): a Config is feasible when some level
of every scored scenario met them, i.e. its capacity is above 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any, TypeGuard

from ..capacity.slo import Slo, per_request_limits, slos_from_limits
from ..errors import ServetuneError
from ..load.records import SummaryLike
from .metrics import CAPACITY, higher_is_better
from .spec import StudySpec

Summary = SummaryLike  # a RunSummary or a plain mapping of one
Runs = Mapping[str, Sequence[Summary]]  # scenario name -> one summary per replicate


class Objective:
    def __init__(self, study: StudySpec):
        spec = study.objective
        self.metric = spec.metric
        self.maximize = spec.maximizing
        self.combine = spec.combine
        self.weights = {n: float(spec.weights.get(n, 1.0)) for n in study.scenario_names}
        self.slo = {n: spec.slo_for(n) for n in study.scenario_names}
        self.is_capacity = self.metric == CAPACITY

    def capacity_slos(self, scenario: str) -> list[Slo]:
        """The SLOs a capacity search of `scenario` judges each load level by."""
        return slos_from_limits(self.slo.get(scenario, {}))

    def goodput_limits(self) -> dict[str, dict[str, float]]:
        """Per scenario with a latency SLO on TTFT, TPOT or E2EL, the limits each request's own
        values are held to for goodput (capacity.slo.per_request_limits)."""
        out = {}
        for scenario, limits in self.slo.items():
            per_request = per_request_limits(slos_from_limits(limits))
            if per_request:
                out[scenario] = per_request
        return out

    @property
    def scored_scenarios(self) -> list[str]:
        return [n for n, w in self.weights.items() if w > 0]

    def samples(self, candidate: Runs, baseline: Runs) -> list[float]:
        """Objective samples, one per replicate (replicate r pairs the r-th run of every scenario);
        empty when some scored scenario has no run."""
        scenarios = self.scored_scenarios
        n = min(len(candidate.get(s, ())) for s in scenarios)
        if n == 0:
            return []
        reference = {s: self._baseline_mean(s, baseline) for s in scenarios}
        gains = {s: [self._gain(s, self._value(s, candidate[s][r]), reference[s]) for r in range(n)] for s in scenarios}
        if self.combine == "worst_case":
            return [min(gains[s][r] for s in scenarios) for r in range(n)]
        total = sum(self.weights[s] for s in scenarios)
        return [sum(self.weights[s] * gains[s][r] for s in scenarios) / total for r in range(n)]

    def slo_violations(self, scenario: str, summary: Summary) -> list[str]:
        """Every SLO of `scenario` that `summary` breaks, as readable text."""
        out: list[str] = []
        if self.is_capacity:
            if self.slo.get(scenario) and _finite(summary.get(CAPACITY)) and summary[CAPACITY] <= 0:
                out.append(f"{scenario}: no load level met every SLO")
            return out
        for metric, limit in self.slo.get(scenario, {}).items():
            value = summary.get(metric)
            if not _finite(value):
                out.append(f"{scenario}: {metric} is missing")
            elif higher_is_better(metric) and value < limit:
                out.append(f"{scenario}: {metric}={value:.4g} < {limit:g}")
            elif not higher_is_better(metric) and value > limit:
                out.append(f"{scenario}: {metric}={value:.4g} > {limit:g}")
        return out

    def _value(self, scenario: str, summary: Summary) -> float:
        value = summary.get(self.metric)
        if not _finite(value):
            raise ServetuneError(f"scenario {scenario!r}: the run's summary has no {self.metric}")
        return float(value)

    def _baseline_mean(self, scenario: str, baseline: Runs) -> float:
        runs = baseline.get(scenario, ())
        if not runs:
            raise ServetuneError(f"scenario {scenario!r}: no baseline run to normalise against")
        mean = fmean(self._value(scenario, s) for s in runs)
        if mean <= 0:
            raise ServetuneError(f"scenario {scenario!r}: baseline {self.metric} is {mean}; cannot normalise by it")
        return mean

    def _gain(self, scenario: str, value: float, reference: float) -> float:
        if self.maximize:
            return value / reference
        if value <= 0:
            raise ServetuneError(f"scenario {scenario!r}: {self.metric}={value} cannot be minimised as a ratio")
        return reference / value


def _finite(value: Any) -> TypeGuard[float]:
    """A finite number (not a bool): true narrows `value` to float for the caller."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

