"""Is there a step after the long requests? Each short phase against the first, per metric, on
the log scale, Holm-corrected across every (phase, metric) compared.

The short requests of a phase are its replicates; phases share one server, so the spread is
pooled across phases (stats.hierarchy's two-level model with one boot: a log-t test on the
replicates). A phase whose TTFT or TPOT is significantly higher than the first phase's, by at
least `min_effect_pct`, is a slowdown; the verdict names each one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..stats import hierarchy, intervals
from ..stats.types import Interval, Verdict
from ..stats.verdict import assess

# Per-request metrics of the short requests (ms): first-token wait and decode pace.
METRICS = ("ttft", "tpot")


@dataclass(frozen=True)
class PhaseEffect:
    phase: str
    after_long: int
    metric: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    p_adjusted: float
    verdict: str             # worse (a slowdown) | better | no_difference


@dataclass(frozen=True)
class DriftAnalysis:
    alpha: float
    min_effect_pct: float
    phases: dict[str, dict[str, Interval]]     # phase -> metric -> geometric mean (ms) with its CI
    effects: list[PhaseEffect]
    slowdowns: list[PhaseEffect] = field(default_factory=list)
    note: str | None = None

    @property
    def verdict(self) -> str:
        if self.note is not None:
            return "unknown"
        return "slowdown" if self.slowdowns else "no_slowdown"

    def line(self) -> str:
        """The verdict in one line."""
        if self.note is not None:
            return f"drift: no verdict: {self.note}"
        if not self.slowdowns:
            worst = max(self.effects, key=lambda e: e.effect_pct, default=None)
            tail = (f"; largest change {worst.metric.upper()} {worst.effect_pct:+.1f} % "
                    f"[{worst.ci_low_pct:+.1f}, {worst.ci_high_pct:+.1f}] ({worst.phase})") if worst else ""
            return (f"drift: no slowdown after the long requests (TTFT and TPOT of short requests, "
                    f"{1 - self.alpha:.0%} CIs, Holm, threshold {self.min_effect_pct:g} %){tail}")
        parts = [f"{e.metric.upper()} {e.effect_pct:+.1f} % [{e.ci_low_pct:+.1f}, {e.ci_high_pct:+.1f}] "
                 f"after {e.after_long} long (p_holm={e.p_adjusted:.2g})" for e in self.slowdowns]
        return "drift: SLOWDOWN after the long requests: " + "; ".join(parts)


def analyze(values: Mapping[str, Mapping[str, Sequence[float]]], after_long: Mapping[str, int], *,
            alpha: float = 0.05, min_effect_pct: float = 10.0) -> DriftAnalysis:
    """`values[phase][metric]`: the short requests' values (ms) of each short phase, the first
    phase (before any long request) first; `after_long[phase]`: long requests sent before it."""
    names = list(values)
    confidence = 1.0 - alpha
    summaries = {p: {m: intervals.log_t_ci(v, confidence) for m in METRICS if len(v := values[p].get(m, ())) >= 1}
                 for p in names}
    short = [m for m in METRICS if all(len(values[p].get(m, ())) >= 2 for p in names)]
    if len(names) < 2 or not short:
        return DriftAnalysis(alpha, min_effect_pct, summaries, [],
                             note="needs two short phases with 2+ successful requests each")
    base, later = names[0], names[1:]
    comparisons = {}
    for metric in short:
        comps = hierarchy.variance_components([[list(values[p][metric])] for p in names])
        for p in later:
            comparisons[(p, metric)] = hierarchy.compare_boots(
                [list(values[base][metric])], [list(values[p][metric])], comps,
                higher_is_better=False, confidence=confidence)
    assessed = assess({f"{p}/{m}": c for (p, m), c in comparisons.items()}, alpha, min_effect_pct)
    effects = []
    for (p, m), c in comparisons.items():
        a = assessed[f"{p}/{m}"]
        effects.append(PhaseEffect(p, after_long[p], m, c.effect_pct, c.ci_low_pct, c.ci_high_pct, c.p_value,
                                   a.adjusted_p, a.verdict.value))
    slowdowns = [e for e in effects if e.verdict == Verdict.worse.value]
    return DriftAnalysis(alpha, min_effect_pct, summaries, effects, slowdowns)
