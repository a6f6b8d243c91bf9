"""The Pareto front of two metrics over a finished study's configs, with their intervals: which
configs no other config beats on both (throughput against a latency percentile, capacity
against the KV cache memory a boot reserved, energy per token against TTFT, ...).

Dominance with intervals: config A dominates B when A's estimates are at least as good as B's
on both axes and A is better on at least one axis by intervals that do not overlap (A's worst end
beyond B's best). Overlapping intervals on both axes never make a config dominated: the study
cannot tell the two apart, so both stay. Each config then stands as

- **front**: no config's estimates are at least as good on both axes and better on one
  (the usual front of the point estimates);
- **tied**: some config's estimates beat it, but never with intervals apart on either axis: it
  may be on the front, the study cannot say it is not;
- **dominated**: a config beats it as above, named in `dominated_by`.

A capacity that is only a bound (a censored boot) is an interval open on its unknown side; a
value without an interval (one run, or the baseline's objective, 1 by construction) is never
apart from another on that axis, so nothing dominates it there and it dominates nothing by it.
The intervals are the analysis' own (the study's confidence, boots nested in configs); two
intervals apart is a stricter test than the study's comparisons, so "dominated" errs to keep a
config on the front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..analysis.types import ConfigResult, Estimate, StudyAnalysis
from ..store import Trial
from ..study.metrics import higher_is_better, metric_problem

OBJECTIVE = "objective"                  # the study's objective, a ratio to the baseline (per config)
KV_CACHE_GIB = "kv_cache_gib"            # the KV cache memory the config's boots reserved (boot log)
JOULES_PER_TOKEN = "joules_per_token"    # energy per output token where power was measured (per scenario)
_PER_CONFIG = {OBJECTIVE: True, KV_CACHE_GIB: False}   # axis -> higher is better
_EXTRA_AXES = (*_PER_CONFIG, JOULES_PER_TOKEN)


def axis_problem(name: str) -> str | None:
    """None for an axis a Pareto front can be drawn on, else what is wrong (with a did-you-mean)."""
    return None if name in _EXTRA_AXES else metric_problem(name, also=_EXTRA_AXES)


def estimated_metric(name: str) -> bool:
    """Whether the axis is a scenario metric the analysis must estimate (not one of the extra axes)."""
    return name not in _EXTRA_AXES


@dataclass(frozen=True)
class Axis:
    name: str

    @property
    def higher_is_better(self) -> bool:
        if self.name in _PER_CONFIG:
            return _PER_CONFIG[self.name]
        return self.name != JOULES_PER_TOKEN and higher_is_better(self.name)

    @property
    def per_config(self) -> bool:
        """The same value in every scenario (the objective, the KV cache)."""
        return self.name in _PER_CONFIG

    @property
    def label(self) -> str:
        return f"{self.name} ({'higher' if self.higher_is_better else 'lower'} is better)"


@dataclass(frozen=True)
class Point:
    key: str
    label: str
    x: Estimate
    y: Estimate
    is_baseline: bool = False
    picks: tuple[str, ...] = ()    # what names it: "winner", a profile's name


class Standing(StrEnum):
    front = "front"
    tied = "tied"
    dominated = "dominated"


@dataclass(frozen=True)
class Ranked:
    point: Point
    standing: Standing
    dominated_by: tuple[str, ...] = ()   # labels of the configs that dominate it


@dataclass(frozen=True)
class Panel:
    """One scenario's front ("" when both axes are the same in every scenario)."""

    scenario: str
    x: Axis
    y: Axis
    ranked: list[Ranked]
    missing: list[str]              # configs that ran but have no value on an axis here

    def standing(self, *kinds: Standing) -> list[Ranked]:
        return [r for r in self.ranked if r.standing in kinds]


def interval(e: Estimate) -> tuple[float, float]:
    """Where the value may lie: its interval, open on a censored side, unbounded where unknown."""
    low = e.low if math.isfinite(e.low) else -math.inf
    high = e.high if math.isfinite(e.high) else math.inf
    if e.censored == "right":      # at least the estimate
        return e.estimate, math.inf
    if e.censored == "left":       # at most the estimate
        return -math.inf, e.estimate
    if e.censored:
        return -math.inf, math.inf
    return low, high


def apart(a: Estimate, b: Estimate, higher: bool) -> bool:
    """a is better than b by intervals that do not overlap."""
    (a_low, a_high), (b_low, b_high) = interval(a), interval(b)
    return a_low > b_high if higher else a_high < b_low


def _not_worse(a: Estimate, b: Estimate, higher: bool) -> bool:
    return a.estimate >= b.estimate if higher else a.estimate <= b.estimate


def dominates(a: Point, b: Point, x: Axis, y: Axis) -> bool:
    """a at least as good as b on both estimates, and better on one by intervals apart."""
    axes = ((a.x, b.x, x.higher_is_better), (a.y, b.y, y.higher_is_better))
    return all(_not_worse(p, q, h) for p, q, h in axes) and any(apart(p, q, h) for p, q, h in axes)


def _beats(a: Point, b: Point, x: Axis, y: Axis) -> bool:
    """The point estimates' dominance: at least as good on both, better on one."""
    axes = ((a.x, b.x, x.higher_is_better), (a.y, b.y, y.higher_is_better))
    return all(_not_worse(p, q, h) for p, q, h in axes) and any(p.estimate != q.estimate for p, q, _ in axes)


def rank(points: Sequence[Point], x: Axis, y: Axis) -> list[Ranked]:
    """Every point's standing, the front first (by x, best first), then the tied, then the dominated."""
    out = []
    for p in points:
        by = tuple(q.label for q in points if q is not p and dominates(q, p, x, y))
        if by:
            out.append(Ranked(p, Standing.dominated, by))
        elif any(q is not p and _beats(q, p, x, y) for q in points):
            out.append(Ranked(p, Standing.tied))
        else:
            out.append(Ranked(p, Standing.front))
    sign = -1.0 if x.higher_is_better else 1.0
    order = list(Standing)
    return sorted(out, key=lambda r: (order.index(r.standing), sign * r.point.x.estimate))


def picks(analysis: StudyAnalysis, profiles: Mapping[str, StudyAnalysis]) -> dict[str, list[str]]:
    """Config key -> what names it: the study's winner ("winner"), each profile whose winner it is."""
    out: dict[str, list[str]] = {}
    for name, a in [("winner", analysis), *profiles.items()]:
        if a.winner is not None:
            out.setdefault(a.winner.key, []).append(name)
    return out


def panels(analysis: StudyAnalysis, trials: Sequence[Trial], x_name: str, y_name: str,
           picks: Mapping[str, Sequence[str]] | None = None) -> list[Panel]:
    """The front of every scenario (one panel when both axes are per config) over the configs that
    ran; `picks` names what chose each config key (the winner, profiles)."""
    x, y = Axis(x_name), Axis(y_name)
    picks = picks or {}
    configs = [c for c in analysis.configs if c.ok and c.measured]
    base = analysis.baseline.config if analysis.baseline is not None else None
    kv = _kv_cache_gib(configs, trials)
    scenarios = [""] if x.per_config and y.per_config else list(analysis.baseline.scenarios
                                                                if analysis.baseline else [])
    out = []
    for scenario in scenarios:
        points, missing = [], []
        for c in configs:
            label = c.config.label(base) if base is not None and not c.is_baseline else c.label
            xv, yv = _value(c, x.name, scenario, kv), _value(c, y.name, scenario, kv)
            if xv is None or yv is None:
                missing.append(label)
                continue
            points.append(Point(c.key, label, xv, yv, c.is_baseline, tuple(picks.get(c.key, ()))))
        if points:
            out.append(Panel(scenario, x, y, rank(points, x, y), missing))
    return out


def _value(c: ConfigResult, name: str, scenario: str, kv: Mapping[str, Estimate]) -> Estimate | None:
    if name == OBJECTIVE:
        e = c.objective
    elif name == KV_CACHE_GIB:
        e = kv.get(c.key)
    elif name == JOULES_PER_TOKEN:
        energy = c.energy.get(scenario)
        e = energy.joules_per_token if energy is not None else None
    else:
        result = c.scenarios.get(scenario)
        e = result.metrics.get(name) if result is not None else None
    return e if e is not None and math.isfinite(e.estimate) else None


def _kv_cache_gib(configs: Sequence[ConfigResult], trials: Sequence[Trial]) -> dict[str, Estimate]:
    """Each config's KV cache memory as its boots' logs give it: the mean, and the range over its
    boots as the interval (the engine's own figure, not a sample)."""
    by_id = {t.id: t for t in trials}
    out = {}
    for c in configs:
        values = [f.kv_cache_memory_gib for t in c.trial_ids
                  if (f := by_id[t].boot_facts if t in by_id else None) is not None
                  and f.kv_cache_memory_gib is not None]
        if values:
            out[c.key] = Estimate(sum(values) / len(values), min(values), max(values), len(values))
    return out


def default_axes(objective_metric: str, slo_metrics: Sequence[str],
                 profile_metrics: Sequence[str] = ()) -> tuple[str, str]:
    """The report's two axes (x, y). With two profiles of different objectives: those two, a
    lower-is-better one on x. Else a latency on x (the first percentile SLO, else p99 E2EL) and a
    throughput on y (the objective where it is one, else output throughput)."""
    chosen = list(dict.fromkeys(m for m in profile_metrics if estimated_metric(m)))
    if len(chosen) >= 2:
        a, b = chosen[:2]
        return (b, a) if Axis(a).higher_is_better and not Axis(b).higher_is_better else (a, b)
    latency = next((m for m in slo_metrics if m.endswith("_ms") and m.startswith("p")), "p99_e2el_ms")
    throughput = objective_metric if higher_is_better(objective_metric) else "output_throughput"
    return latency, throughput
