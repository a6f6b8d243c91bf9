"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes.

Each function takes plain data and returns None when there is nothing to draw, so a section
without data is left out rather than drawn empty.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display anywhere servetune runs; must precede any pyplot import
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..analysis.types import DriftPoint, Estimate  # noqa: E402
from ..load.records import SummaryLike  # noqa: E402
from .pareto import Panel  # noqa: E402

DPI = 100
SERIES_TITLES = {"ttft": "TTFT (ms)", "tpot": "TPOT (ms)", "itl": "ITL (ms)", "e2el": "E2E latency (ms)"}


@dataclass(frozen=True)
class Plot:
    name: str      # file stem
    title: str
    png: bytes


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


png = _png  # for the figure modules beside this one (trace_plot.py)


def latency_distributions(data: Mapping[str, Mapping[str, Mapping[str, np.ndarray]]],
                          series: Sequence[str] = ("ttft", "tpot", "itl")) -> bytes | None:
    """ECDFs of per-request latencies: one row per scenario, one column per series, one line per config.

    `data`: scenario -> config label -> series name -> values in ms.
    """
    scenarios = [s for s, by_cfg in data.items() if any(len(v.get(k, ())) for v in by_cfg.values() for k in series)]
    if not scenarios:
        return None
    fig = Figure(figsize=(4.2 * len(series), 3.0 * len(scenarios)))
    axes = fig.subplots(len(scenarios), len(series), squeeze=False)
    for row, scenario in enumerate(scenarios):
        for col, name in enumerate(series):
            ax = axes[row][col]
            for label, by_series in data[scenario].items():
                values = np.sort(np.asarray(by_series.get(name, ()), dtype=float))
                if values.size:
                    ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=label)
            ax.set_title(f"{scenario}: {SERIES_TITLES.get(name, name)}", fontsize=9)
            ax.set_ylabel("fraction of requests", fontsize=8)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:  # one legend for the figure, below the grid, so no curve is hidden
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8,
                   bbox_to_anchor=(0.5, -0.02 - 0.03 * ((len(labels) - 1) // 3)))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _png(fig)


_STANDING_STYLE = {"front": ("tab:blue", "o", 1.0), "tied": ("tab:blue", "o", 0.45),
                   "dominated": ("tab:gray", "o", 0.45)}   # colour, marker, alpha


def pareto_front(panels: Sequence[Panel]) -> bytes | None:
    """One panel per scenario: every config with its intervals as error bars (an open end drawn to
    the axis' edge is left out), the front joined in x order, tied configs faded, dominated ones
    grey, the baseline a square, the winner and the profiles' choices named beside their point."""
    if not panels:
        return None
    fig = Figure(figsize=(5.2 * len(panels), 4.0))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        for standing, (colour, marker, alpha) in _STANDING_STYLE.items():
            ranked = [r for r in panel.ranked if r.standing == standing]
            if not ranked:
                continue
            xs = [r.point.x.estimate for r in ranked]
            ys = [r.point.y.estimate for r in ranked]
            ax.errorbar(xs, ys, xerr=_bars([r.point.x for r in ranked]), yerr=_bars([r.point.y for r in ranked]),
                        fmt=marker, color=colour, alpha=alpha, capsize=2, ms=5, label=standing)
        front = sorted((r.point for r in panel.ranked if r.standing == "front"), key=lambda p: p.x.estimate)
        ax.plot([p.x.estimate for p in front], [p.y.estimate for p in front], "-", color="tab:blue", lw=1)
        for r in panel.ranked:
            p = r.point
            if p.is_baseline:
                ax.scatter([p.x.estimate], [p.y.estimate], s=90, marker="s", facecolors="none",
                           edgecolors="tab:red", zorder=3, label="baseline")
            if p.picks:
                ax.annotate(", ".join(p.picks), (p.x.estimate, p.y.estimate), textcoords="offset points",
                            xytext=(6, 6), fontsize=7, color="tab:green")
        ax.set_xlabel(panel.x.label, fontsize=8)
        ax.set_ylabel(panel.y.label, fontsize=8)
        ax.set_title(panel.scenario or "all scenarios", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def _bars(estimates: Sequence[Estimate]) -> list[list[float]]:
    """Error bar lengths below and above each estimate; an unbounded or unknown end draws none."""
    def length(end: float, estimate: float) -> float:
        return abs(end - estimate) if math.isfinite(end) else 0.0
    return [[length(e.low, e.estimate) for e in estimates], [length(e.high, e.estimate) for e in estimates]]


@dataclass(frozen=True)
class ObjectivePoint:
    seq: int
    label: str
    estimate: float | None     # None: failed or infeasible config
    low: float = math.nan
    high: float = math.nan


def objective_over_trials(points: Sequence[ObjectivePoint], objective: str, maximize: bool = True) -> bytes | None:
    if not points:
        return None
    fig = Figure(figsize=(8.0, 3.6))
    ax = fig.subplots()
    # (point, its estimate): the estimate narrowed to a finite float
    ok = [(p, p.estimate) for p in points if p.estimate is not None and math.isfinite(p.estimate)]
    if ok:
        lows = [est - p.low if math.isfinite(p.low) else 0.0 for p, est in ok]
        highs = [p.high - est if math.isfinite(p.high) else 0.0 for p, est in ok]
        ax.errorbar([p.seq for p, _ in ok], [est for _, est in ok], yerr=[lows, highs], fmt="o", capsize=3,
                    label="config (CI)")
        running = np.maximum if maximize else np.minimum
        best = running.accumulate([est for _, est in ok])
        ax.step([p.seq for p, _ in ok], best, where="post", color="tab:green", alpha=0.7, label="best so far")
    failed = [p for p in points if p.estimate is None or not math.isfinite(p.estimate)]
    if failed:
        y0 = min((est for _, est in ok), default=1.0)
        ax.scatter([p.seq for p in failed], [y0] * len(failed), marker="x", color="tab:red", label="failed")
    ax.axhline(1.0, color="tab:gray", ls="--", lw=1, label="baseline = 1")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(f"objective ({objective}, relative to baseline)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def drift(points: Sequence[DriftPoint]) -> bytes | None:
    """Baseline re-measurements over time, one line per scenario and metric."""
    if not points:
        return None
    t0 = min(p.at for p in points)
    groups: dict[tuple[str, str], list[DriftPoint]] = {}
    for p in points:
        groups.setdefault((p.scenario, p.metric), []).append(p)
    fig = Figure(figsize=(8.0, 3.6))
    ax = fig.subplots()
    for (scenario, metric), pts in sorted(groups.items()):
        pts.sort(key=lambda p: p.at)
        first = pts[0].value or 1.0
        ax.plot([(p.at - t0) / 60.0 for p in pts], [100.0 * (p.value / first - 1.0) for p in pts], "-o", ms=4,
                label=f"{scenario}: {metric}")
    ax.axhline(0.0, color="tab:gray", ls="--", lw=1)
    ax.set_xlabel("minutes since the first baseline")
    ax.set_ylabel("% change from first measurement", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


@dataclass(frozen=True)
class CurvePoint:
    level: float                  # offered rate (req/s) or concurrency
    values: SummaryLike           # summary metric -> ms (p99_ttft_ms, p99_itl_ms, ...)


@dataclass(frozen=True)
class CapacityCurve:
    label: str
    boots: Sequence[Sequence[CurvePoint]]   # the levels of each boot: one line each
    capacity: float | None                  # where the capacity was put (None: not found)


def latency_vs_load(curves: Mapping[str, Sequence[CapacityCurve]], metrics: Mapping[str, Sequence[str]],
                    limits: Mapping[str, Mapping[str, float]], load_label: Mapping[str, str]) -> bytes | None:
    """One row per scenario, one column per latency metric (`metrics[scenario]`): the metric
    against the load level, one line per boot of each config (a config's boots in one colour), the
    SLO limit as a horizontal line and each config's capacity as a vertical one in the config's colour."""
    scenarios = [s for s, cs in curves.items() if any(any(b) for c in cs for b in c.boots) and metrics.get(s)]
    if not scenarios:
        return None
    cols = max(len(metrics[s]) for s in scenarios)
    fig = Figure(figsize=(4.6 * cols, 3.4 * len(scenarios)))
    axes = fig.subplots(len(scenarios), cols, squeeze=False)
    for row, scenario in enumerate(scenarios):
        for col in range(cols):
            ax = axes[row][col]
            if col >= len(metrics[scenario]):
                ax.set_visible(False)
                continue
            metric = metrics[scenario][col]
            for i, curve in enumerate(curves[scenario]):
                colour = f"C{i}"
                for boot, points in enumerate(curve.boots):
                    pts = sorted((p for p in points if math.isfinite(p.values.get(metric, math.nan))),
                                 key=lambda p: p.level)
                    ax.plot([p.level for p in pts], [p.values[metric] for p in pts], "-o", ms=4, color=colour,
                            alpha=0.9 if boot == 0 else 0.55, label=curve.label if boot == 0 else None)
                if curve.capacity:
                    ax.axvline(curve.capacity, color=colour, ls=":", lw=1.2,
                               label=f"capacity {curve.capacity:.3g} ({curve.label})")
            if metric in limits.get(scenario, {}):
                ax.axhline(limits[scenario][metric], color="tab:red", ls="--", lw=1, label=f"SLO {metric}")
            ax.set_xlabel(load_label.get(scenario, "load"), fontsize=8)
            ax.set_ylabel(metric, fontsize=8)
            ax.set_yscale("log")
            ax.set_title(f"{scenario}: {metric}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    return _png(fig)
