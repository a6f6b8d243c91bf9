"""Is anything growing over the soak? One regression per signal over the windows, with an interval.

Each signal (a window's geometric-mean TTFT and TPOT, the server's RSS, its peak KV cache usage,
its preemptions per request) is regressed on the window's time (hours from the start) with one
offset per scenario, so that cycling a light and a heavy scenario is not mistaken for a trend. The
slope's Student-t interval comes from the residual spread; latencies are regressed on the log
scale (a slope is then % per hour). A signal is unstable when its slope is significant after Holm
across the signals, and the change it implies over the whole soak reaches that signal's threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from ..stats.multiple import holm


@dataclass(frozen=True)
class Signal:
    name: str
    label: str
    unit: str              # of the signal (its slope is this per hour)
    log: bool              # regressed on the log scale: the change is in %
    relative: bool         # the threshold is a % of the signal's mean (else in its unit)
    min_change: float      # over the soak, in % (log or relative) or in `unit`


SIGNALS = {s.name: s for s in (
    Signal("ttft", "TTFT", "ms", log=True, relative=True, min_change=10.0),
    Signal("tpot", "TPOT", "ms", log=True, relative=True, min_change=10.0),
    Signal("rss", "server memory (RSS)", "MiB", log=False, relative=True, min_change=10.0),
    Signal("kv_cache_usage", "KV cache usage", "%", log=False, relative=False, min_change=10.0),
    Signal("preemptions", "preemptions per 100 requests", "/100 req", log=False, relative=False, min_change=1.0),
)}


@dataclass(frozen=True)
class Trend:
    signal: str
    windows: int
    slope_per_h: float           # the fit's own scale: log(ms) per hour for a latency, else unit per hour
    slope_low: float
    slope_high: float
    change: float                # implied over the soak's span: % (log or relative) or unit
    change_low: float
    change_high: float
    p_value: float
    span_h: float = 0.0          # from the first window's middle to the last's
    p_adjusted: float = 1.0
    growing: bool = False

    def text(self, confidence: float) -> str:
        sig = SIGNALS[self.signal]
        over = "%" if sig.log or sig.relative else f" {sig.unit}"
        return (f"{sig.label} slope {self.slope_text()} "
                f"({confidence:.0%} CI, {self.windows} windows), {self.change:+.3g}{over} over the soak "
                f"[{self.change_low:+.3g}, {self.change_high:+.3g}], p_holm={self.p_adjusted:.2g}")


    def slope_text(self) -> str:
        """The slope with its interval per hour, or per minute or second for a shorter soak (a short
        soak's % per hour would compound a small drift into an absurd number)."""
        sig = SIGNALS[self.signal]
        per, hours = (("h", 1.0) if self.span_h >= 1.0 else ("min", 1 / 60) if self.span_h >= 1 / 60
                      else ("s", 1 / 3600))
        if sig.log:
            vals = [_pct(v * hours) for v in (self.slope_per_h, self.slope_low, self.slope_high)]
            unit = "%"
        else:
            vals = [v * hours for v in (self.slope_per_h, self.slope_low, self.slope_high)]
            unit = f" {sig.unit}"
        return f"{vals[0]:+.3g}{unit}/{per} [{vals[1]:+.3g}, {vals[2]:+.3g}]"


@dataclass(frozen=True)
class SoakAnalysis:
    alpha: float
    trends: list[Trend]
    crashed: bool = False
    crash_detail: str | None = None
    note: str | None = None        # why no trend could be judged
    unstable: list[Trend] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.crashed:
            return "crashed"
        if self.unstable:
            return "unstable"
        return "unknown" if self.note is not None else "stable"

    def line(self) -> str:
        """The verdict in one line, with its evidence."""
        confidence = 1 - self.alpha
        if self.crashed:
            return f"soak: CRASHED: {self.crash_detail}"
        if self.unstable:
            what = "; ".join(f"{_cause(t.signal)}: {t.text(confidence)}" for t in self.unstable)
            return f"soak: UNSTABLE: {what}"
        if self.note is not None:
            return f"soak: no verdict: {self.note}"
        judged = ", ".join(SIGNALS[t.signal].label for t in self.trends)
        worst = max((t for t in self.trends if SIGNALS[t.signal].log), key=lambda t: t.change, default=None)
        tail = f"; largest latency trend: {worst.text(confidence)}" if worst else ""
        return f"soak: stable (no growth in {judged}; Holm at alpha {self.alpha:g}){tail}"


def _cause(signal: str) -> str:
    return {"ttft": "latency drift", "tpot": "latency drift", "rss": "memory growth",
            "kv_cache_usage": "KV cache growth", "preemptions": "preemptions growing"}[signal]


def slope_with_offsets(hours: Sequence[float], values: Sequence[float] | np.ndarray, groups: Sequence[str],
                       confidence: float) -> tuple[float, float, float, float] | None:
    """OLS slope of `values` on `hours` with one intercept per group: (slope, low, high, p), or None
    when no residual degree of freedom is left (too few windows for the groups)."""
    names = sorted(set(groups))
    x = np.column_stack([np.asarray(hours, dtype=float)]
                        + [np.array([g == name for g in groups], dtype=float) for name in names])
    y = np.asarray(values, dtype=float)
    rank = np.linalg.matrix_rank(x)
    df = len(y) - rank
    if df < 1 or rank < x.shape[1]:  # every window of a group at one time: no slope to see
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    sigma2 = float(resid @ resid) / df
    se = math.sqrt(sigma2 * float(np.linalg.inv(x.T @ x)[0, 0]))
    slope = float(coef[0])
    if se == 0.0:  # no spread around the fit: a flat series says no trend, a perfect line says one
        return slope, slope, slope, 1.0 if slope == 0.0 else 0.0
    t = float(sps.t.ppf(0.5 + confidence / 2, df))
    p = float(2 * sps.t.sf(abs(slope / se), df))
    return slope, slope - t * se, slope + t * se, p


def analyze(series: Mapping[str, Sequence[float | None]], hours: Sequence[float], scenarios: Sequence[str],
            *, alpha: float = 0.05, thresholds: Mapping[str, float] | None = None,
            crash_detail: str | None = None) -> SoakAnalysis:
    """`series[signal]`: one value per window (None: not measured then), `hours` each window's
    middle from the soak's start, `scenarios` each window's scenario; `thresholds` override
    SIGNALS' min_change; `crash_detail`: set when the server died (the verdict is then crashed)."""
    confidence = 1 - alpha
    trends: list[Trend] = []
    for name, values in series.items():
        sig = SIGNALS[name]
        kept = [(h, float(v), s) for h, v, s in zip(hours, values, scenarios, strict=True)
                if v is not None and math.isfinite(v) and (v > 0 or not sig.log)]
        if len(kept) < 3:
            continue
        h, v, g = zip(*kept, strict=True)
        y = np.log(v) if sig.log else np.asarray(v)
        fit = slope_with_offsets(h, y, g, confidence)
        if fit is None:
            continue
        slope, low, high, p = fit
        span = max(h) - min(h)
        if sig.log:
            conv = [slope, low, high]
            changes = [_pct(b * span) for b in (slope, low, high)]
        else:
            mean = float(np.mean(v))
            scale = 100.0 / mean if sig.relative and mean > 0 else 1.0
            conv = [slope, low, high]
            changes = [b * span * scale for b in (slope, low, high)]
        trends.append(Trend(name, len(kept), conv[0], conv[1], conv[2], changes[0], changes[1], changes[2], p, span))
    if trends:
        adjusted = holm([t.p_value for t in trends])
        limits = {n: s.min_change for n, s in SIGNALS.items()} | dict(thresholds or {})
        trends = [_judged(t, float(p), alpha, limits[t.signal]) for t, p in zip(trends, adjusted, strict=True)]
    unstable = [t for t in trends if t.growing]
    note = None
    if not any(SIGNALS[t.signal].log for t in trends):
        note = "too few windows with successful requests for a latency trend (3+, and 2+ of a scenario)"
    return SoakAnalysis(alpha, trends, crashed=crash_detail is not None, crash_detail=crash_detail, note=note,
                        unstable=unstable)


def _pct(log_change: float) -> float:
    """A change on the log scale as %, finite however steep (a seconds-long test soak's % per hour)."""
    return 100.0 * math.expm1(min(log_change, _MAX_LOG_CHANGE))


_MAX_LOG_CHANGE = 700.0  # exp() overflows a float past ~709


def _judged(t: Trend, p_adjusted: float, alpha: float, min_change: float) -> Trend:
    growing = bool(p_adjusted < alpha and t.slope_low > 0 and t.change >= min_change)
    return Trend(**{**t.__dict__, "p_adjusted": p_adjusted, "growing": growing})
