"""What a report shows of a `maximize: capacity` study: each config's capacity per scenario with
its interval (across boots, and each boot's own search interval), the effect against the
baseline, the cost per million output tokens at capacity when the study gives a GPU price, the
latency-against-load curves of the default and the best config, and every load level each boot
measured, judged by the current rules (the evidence behind each capacity)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

import numpy as np

from ..analysis.capacity_runs import current_capacity_runs, interval_text, is_level_run, judged_levels
from ..analysis.types import ConfigResult, Effect, Estimate, StudyAnalysis
from ..capacity.levels import LevelResult
from ..capacity.slo import Judgement, Slo, slo_from_key, slos_from_limits, statistic
from ..engine.placement import server_gpus
from ..store import Run, Trial
from ..study.metrics import CAPACITY
from ..study.spec import CapacitySpec, ObjectiveSpec
from . import plots

_UNIT = {"rate": "req/s", "concurrency": "concurrent requests", "speedup": "x the recorded traffic"}


@dataclass
class CapacityRow:
    label: str
    scenario: str
    unit: str                            # req/s or concurrent requests
    capacity: Estimate | None            # across boots (the two-level model's unit)
    per_boot: list[str]                  # each boot's search: "12.3 [10.1, 14.0]"
    effect: Effect | None                # vs the baseline, two-level model
    usd_per_million_tokens: float | None = None
    binding: str | None = None


@dataclass
class LevelRow:
    label: str
    trial_seq: int
    level: float
    runs: int
    judged: int                          # requests whose latencies were judged (a closed loop's first wave is not)
    failed: int                          # of them, ended without an answer: counted over every limit
    slos: list[str]                      # per SLO of the table: "estimate [low, high]" in ms
    goodput: str                         # req/s meeting every per-request SLO: "estimate [low, high]"
    verdict: str
    stopped: str | None                  # why the monitor ended a run early


@dataclass
class LevelTable:
    scenario: str
    unit: str
    slos: list[str]                      # the column heads, e.g. ttft:p95<=1000ms
    rows: list[LevelRow] = field(default_factory=list)


@dataclass
class CapacityView:
    rows: list[CapacityRow] = field(default_factory=list)
    price_per_gpu_hour: float | None = None
    plot: plots.Plot | None = None
    levels: list[LevelTable] = field(default_factory=list)   # per scenario


def usd_per_million_tokens(price_per_gpu_hour: float, gpu_count: int, output_tokens_per_s: float) -> float:
    """What a million output tokens cost on servers running at their capacity."""
    return price_per_gpu_hour * gpu_count / (output_tokens_per_s * 3600.0) * 1e6


def _capacity_runs(c: ConfigResult, runs_by_trial: Mapping[int, list[Run]], scenario: str) -> list[Run]:
    return current_capacity_runs([r for t in c.trial_ids for r in runs_by_trial.get(t, [])], scenario)


def build_capacity(analysis: StudyAnalysis, trials: Sequence[Trial], objective: ObjectiveSpec,
                   price_per_gpu_hour: float | None, study_dir: Path, capacity: CapacitySpec) -> CapacityView | None:
    """None unless the study maximised capacity."""
    if analysis.objective_metric != CAPACITY:
        return None
    runs_by_trial = {t.id: list(t.runs) for t in trials}
    view = CapacityView(price_per_gpu_hour=price_per_gpu_hour)
    for c in analysis.configs:
        label = _label(c, analysis)
        for scenario, result in c.scenarios.items():
            runs = _capacity_runs(c, runs_by_trial, scenario)
            if not runs:
                continue
            served = [r.summary["output_throughput_at_capacity"] for r in runs
                      if r.summary.get("output_throughput_at_capacity")]
            cost = (usd_per_million_tokens(price_per_gpu_hour, server_gpus(c.config), fmean(served))
                    if price_per_gpu_hour and served else None)
            view.rows.append(CapacityRow(
                label=label, scenario=scenario, unit=_UNIT.get(runs[0].summary.get("load", ""), ""),
                capacity=result.metrics.get(CAPACITY), per_boot=[interval_text(r.summary) for r in runs],
                effect=result.effects.get(CAPACITY), usd_per_million_tokens=cost,
                binding=runs[-1].summary.get("capacity_binding")))
    judged = _judge_boots(analysis, trials, objective, study_dir, capacity)
    view.plot = _curves(analysis, judged, objective)
    view.levels = _level_tables(analysis, trials, judged)
    return view


_CURVE_METRICS = ("ttft", "itl")


@dataclass
class _BootLevels:
    """One boot's levels of one scenario, pooled and judged by the scenario's SLOs as the search
    judges them (the table's columns)."""

    load: str
    slos: list[Slo]
    levels: list[LevelResult]


def _plotted_metric(limits: Mapping[str, float], metric: str) -> str:
    """The statistic of `metric` the SLO bounds (so its line is drawn), else its p99."""
    return next((k for k in limits if k.endswith(f"_{metric}_ms")), f"p99_{metric}_ms")


def _judge_boots(analysis: StudyAnalysis, trials: Sequence[Trial], objective: ObjectiveSpec,
                 study_dir: Path, capacity: CapacitySpec) -> dict[int, dict[str, _BootLevels]]:
    """Every boot's levels judged again from their stored records, once for the table and the
    curves alike: a closed loop's first wave is left out of both, as it is of the verdicts (a run
    summary's percentiles count it)."""
    looks = capacity.looks(1.0 - analysis.confidence)
    out: dict[int, dict[str, _BootLevels]] = {}
    for trial in trials:
        by_scenario: dict[str, list[Run]] = {}
        for r in trial.runs:
            if is_level_run(r.summary):
                by_scenario.setdefault(r.scenario, []).append(r)
        for scenario, level_runs in by_scenario.items():
            slos = slos_from_limits(objective.slo_for(scenario))
            out.setdefault(trial.id, {})[scenario] = _BootLevels(
                str(level_runs[0].summary.get("load", "")), slos, judged_levels(level_runs, slos, looks, study_dir))
    return out


def _label(c: ConfigResult, analysis: StudyAnalysis) -> str:
    base_cfg = analysis.baseline.config if analysis.baseline else None
    return c.label if c.is_baseline or base_cfg is None else c.config.label(base_cfg)


def _level_tables(analysis: StudyAnalysis, trials: Sequence[Trial],
                  judged: Mapping[int, Mapping[str, _BootLevels]]) -> list[LevelTable]:
    """Per scenario, each boot's levels as today's judgement pools and judges them: the same
    verdicts the capacity Runs were (re-)estimated from, so a reader can follow every bound."""
    seq = {t.id: t.seq for t in trials}
    tables: dict[str, LevelTable] = {}
    for c in analysis.configs:
        for trial_id in c.trial_ids:
            for scenario, boot in judged.get(trial_id, {}).items():
                table = tables.setdefault(scenario, LevelTable(scenario, _UNIT.get(boot.load, "load"),
                                                               [str(s) for s in boot.slos]))
                table.rows += [_level_row(_label(c, analysis), seq[trial_id], lv, analysis.confidence)
                               for lv in boot.levels]
    return [tables[s] for s in sorted(tables)]


def _level_row(label: str, trial_seq: int, lv: LevelResult, confidence: float) -> LevelRow:
    failed = sum(s.failed for s in lv.samples)
    return LevelRow(label=label, trial_seq=trial_seq, level=lv.level, runs=len(lv.samples),
                    judged=lv.completed + failed, failed=failed,
                    slos=[_judged_text(j) for j in lv.judgements], goodput=_goodput_text(lv, confidence),
                    verdict=lv.verdict.value, stopped=lv.stopped)


def _goodput_text(lv: LevelResult, confidence: float) -> str:
    """`11.8 [10.9, 12.4]` req/s; `-` where the level's runs hold no per-request flags."""
    ci = lv.goodput(confidence)
    if ci is None or not math.isfinite(ci.estimate):
        return "-"
    return f"{ci.estimate:.3g} [{ci.low:.3g}, {ci.high:.3g}]"


def _statistic(lv: LevelResult, key: str) -> float:
    """A statistic no SLO judges (`p99_itl_ms`), over the level's pooled judged values."""
    slo = slo_from_key(key, math.inf)
    if slo is None:
        return math.nan
    values = np.concatenate([v for smp in lv.samples for v in smp.values.get(slo.metric, [])] or [np.zeros(0)])
    return statistic(slo, values[np.isfinite(values)])   # of the answered requests (failed ones: inf)


def _ms(x: float) -> str:
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _judged_text(j: Judgement) -> str:
    """`278 [227, 376]`: the statistic and its interval, in ms; in words where no request was judged."""
    if j.n == 0:
        return "no judged request"
    return f"{_ms(j.estimate)} [{_ms(j.low)}, {_ms(j.high)}]"


def _best(analysis: StudyAnalysis) -> ConfigResult | None:
    """The winner, else the measured candidate of the highest capacity."""
    if analysis.winner is not None:
        return analysis.winner
    measured = [(c, c.objective.estimate) for c in analysis.configs
                if not c.is_baseline and c.objective is not None and math.isfinite(c.objective.estimate)]
    best = max(measured, key=lambda m: m[1], default=None)
    return best[0] if best is not None else None


def _curves(analysis: StudyAnalysis, judged: Mapping[int, Mapping[str, _BootLevels]],
            objective: ObjectiveSpec) -> plots.Plot | None:
    """The judged statistic at each level (one point a level, its runs pooled), one line per boot."""
    shown = [c for c in (analysis.baseline, _best(analysis)) if c is not None]
    limits = {s: objective.slo_for(s) for boots in judged.values() for s in boots}
    metrics = {s: [_plotted_metric(limits[s], m) for m in _CURVE_METRICS] for s in limits}
    curves: dict[str, list[plots.CapacityCurve]] = {}
    loads: dict[str, str] = {}
    for c in shown:
        boots: dict[str, list[list[plots.CurvePoint]]] = {}
        for trial_id in c.trial_ids:
            for scenario, boot in judged.get(trial_id, {}).items():
                boots.setdefault(scenario, []).append([plots.CurvePoint(lv.level, _point(lv, metrics[scenario]))
                                                       for lv in boot.levels])
                loads[scenario] = _UNIT.get(boot.load, "load")
        for scenario, per_boot in boots.items():
            cap = c.scenarios.get(scenario)
            est = cap.metrics.get(CAPACITY) if cap else None
            label = "default" if c.is_baseline else _label(c, analysis)
            curves.setdefault(scenario, []).append(plots.CapacityCurve(label, per_boot, est.estimate if est else None))
    png = plots.latency_vs_load(curves, metrics, limits, {s: f"offered load ({u})" for s, u in loads.items()})
    if png is None:
        return None
    return plots.Plot("latency_vs_load", "Latency against offered load: default and best config, SLOs and capacity",
                      png)


def _point(lv: LevelResult, keys: Sequence[str]) -> dict[str, float]:
    """The plotted statistics at one level: the judged estimate where an SLO names it."""
    judged = {j.slo.key: j.estimate for j in lv.judgements}
    return {k: judged[k] if k in judged else _statistic(lv, k) for k in keys}
