"""Speculative decoding in a report: each config's acceptance per scenario (from its runs' /metrics
deltas), and, where the study swept num_speculative_tokens, the n that peaks per scenario.

The field saw the best n move with the workload (n = 3 on short prompts, n = 6 on 24k-token
ones), so the peak is named per scenario, with the scenario metric's interval, next to the
runner-up's: where the two intervals overlap, the data do not separate them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..analysis.types import ConfigResult, Estimate, StudyAnalysis
from ..engine import speculative
from ..engine.config import Config
from ..load.speculative_metrics import Acceptance


@dataclass(frozen=True)
class AcceptanceRow:
    label: str
    scenario: str
    method: str | None
    tokens: int
    rate: float | None
    mean_length: float
    per_position: tuple[float, ...]


@dataclass(frozen=True)
class SweepPoint:
    tokens: int                     # 0: speculative decoding off
    value: Estimate


@dataclass(frozen=True)
class SweepPeak:
    scenario: str
    metric: str
    peak: SweepPoint
    runner_up: SweepPoint | None
    points: list[SweepPoint]        # every n measured, in order of n

    @property
    def separated(self) -> bool:
        """The peak's interval and the runner-up's do not overlap."""
        if self.runner_up is None:
            return False
        a, b = self.peak.value, self.runner_up.value
        return all(math.isfinite(x) for x in (a.low, a.high, b.low, b.high)) and (a.low > b.high or a.high < b.low)


def acceptance_rows(analysis: StudyAnalysis, base: Config | None) -> list[AcceptanceRow]:
    rows = []
    for c in analysis.configs:
        label = c.label if c.is_baseline or base is None else c.config.label(base)
        for scenario, result in c.scenarios.items():
            acc = Acceptance.of(result.server)
            if acc is not None:
                rows.append(AcceptanceRow(label, scenario, speculative.method(c.config),
                                          speculative.speculative_tokens(c.config), acc.rate, acc.mean_length,
                                          acc.per_position))
    return rows


def _sweep(analysis: StudyAnalysis) -> dict[int, ConfigResult]:
    """The measured configs that differ from the baseline in n alone, by n (the baseline included)."""
    if analysis.baseline is None:
        return {}
    base = analysis.baseline.config
    return {speculative.speculative_tokens(c.config): c for c in analysis.configs
            if c.measured and speculative.differs_only_in_tokens(c.config, base)}


def sweep_peaks(analysis: StudyAnalysis) -> list[SweepPeak]:
    """Per scenario, the n with the best value of the objective's metric (only when 2+ values of
    n were measured, at least one of them speculative)."""
    by_n = _sweep(analysis)
    if len(by_n) < 2 or not any(by_n):
        return []
    metric, maximize = analysis.objective_metric, analysis.objective_direction == "maximize"
    scenarios = list(dict.fromkeys(s for c in by_n.values() for s in c.scenarios))
    peaks = []
    for scenario in scenarios:
        points = [SweepPoint(n, est) for n, c in sorted(by_n.items())
                  if (r := c.scenarios.get(scenario)) is not None and (est := r.metrics.get(metric)) is not None
                  and math.isfinite(est.estimate)]
        if len(points) < 2:
            continue
        ranked = sorted(points, key=lambda p: p.value.estimate, reverse=maximize)
        peaks.append(SweepPeak(scenario, metric, ranked[0], ranked[1], points))
    return peaks


def peak_line(peak: SweepPeak) -> str:
    """One scenario's peak for the terminal: `short: n = 4 peaks (output_throughput 123 [118, 128]; ...)`."""
    def value(p: SweepPoint) -> str:
        v = p.value
        ci = f" [{v.low:.4g}, {v.high:.4g}]" if math.isfinite(v.low) and math.isfinite(v.high) else ""
        return f"{v.estimate:.4g}{ci}"

    tail = ""
    if peak.runner_up is not None:
        tail = (f"; runner-up n = {peak.runner_up.tokens}: {value(peak.runner_up)}"
                + ("" if peak.separated else ", intervals overlap"))
    return (f"speculative decoding, {peak.scenario}: n = {peak.peak.tokens} peaks "
            f"({peak.metric} {value(peak.peak)}{tail})")
