"""The A/B's verdicts: per scenario and metric, B against A in the two-level (boot, replicate)
model, Holm-corrected over the whole table; and per side the cold/warm prefix-reuse ratio."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..engine.defaults import EngineDefaults
from ..engine.registry import profile_for
from ..machine import differences
from ..stats.hierarchy import compare_boots, variance_components
from ..stats.intervals import geometric_mean_ci
from ..stats.multiple import holm
from ..stats.power import boots_needed
from ..stats.types import Comparison, Interval
from ..stats.verdict import label, verdict
from ..store import Run, StudyStore, Trial, TrialRole
from ..study.metrics import higher_is_better
from ..vocabulary import Outcome
from . import prefix_reuse
from .config_diff import ConfigDiff, SideConfig, diff_sides
from .spec import SIDES, AbSpec

TARGET_EFFECT_PCT = 10.0
DEFAULT_METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
REUSE_METRICS = ("mean_cold_ttft_ms", "mean_warm_ttft_ms", "warm_over_cold")
_LOWER_IS_BETTER = {"warm_over_cold"}  # a ratio of times: the warm send should take a fraction
# Store meta: each side's engine argument defaults ({side: EngineDefaults}), read at the A/B's start.
DEFAULTS_META_KEY = "ab_defaults"


@dataclass(frozen=True)
class AbRow:
    """B against A on one metric of one scenario; `verdict` is B's (better / worse / no_difference,
    or promising / not_promising when a side has one boot), `note` why there is none;
    `boots_for_target`: boots a side that detect a TARGET_EFFECT_PCT change (90 % power) at the
    measured variances, None when unknown or beyond 1000."""

    scenario: str
    metric: str
    comparison: Comparison | None
    adjusted_p: float = math.nan
    verdict: str = "not compared"
    note: str = ""
    boots_for_target: int | None = None


@dataclass(frozen=True)
class ReuseSide:
    """Warm over cold TTFT of one side's pairs (every boot's), with the cold and warm TTFTs:
    geometric means, as the table's."""

    side: str
    ratio: Interval
    cold_ms: Interval
    warm_ms: Interval


@dataclass(frozen=True)
class BootSummary:
    seq: int
    side: str
    outcome: str
    version: str | None
    boot_s: float | None
    runs: int


@dataclass(frozen=True)
class AbAnalysis:
    rows: list[AbRow]
    reuse: list[ReuseSide]
    boots: list[BootSummary]
    commands: dict[str, str]
    alpha: float
    min_effect_pct: float
    planned_boots: int = 0
    versions: dict[str, list[str]] = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)  # side -> its engine's label ("vLLM")
    config: ConfigDiff = field(default_factory=ConfigDiff)  # what differs in the sides' resolved configuration
    machines: list[str] = field(default_factory=list)   # the machine(s) measured on, and boots that differ

    def engine_label(self, side: str) -> str:
        return self.engines.get(side, "vLLM")  # an analysis built before sides named their engine

    def measured_boots(self, side: str) -> int:
        return len([b for b in self.boots if b.side == side and b.runs and b.outcome == str(Outcome.ok)])

    @property
    def headline(self) -> str:
        if not self.measured_boots("A") or not self.measured_boots("B"):
            missing = [s for s in SIDES if not self.measured_boots(s)]
            return f"no verdict: no boot of {' and '.join(missing)} was measured"
        differ = [r for r in self.rows if r.verdict in ("better", "worse")]
        compared = [r for r in self.rows if r.comparison is not None]
        if not differ:
            return (f"no significant difference between B and A on {len(compared)} comparison(s) "
                    f"(Holm, alpha {self.alpha:g})")
        parts = [f"{r.scenario} {r.metric} {r.comparison.effect_pct:+.1f} % ({r.verdict})"
                 for r in differ if r.comparison is not None]
        return f"B differs from A on {len(differ)} of {len(compared)} comparison(s): " + "; ".join(parts)


def analyze(store: StudyStore, spec: AbSpec, metrics: Sequence[str] = DEFAULT_METRICS) -> AbAnalysis:
    trials = [t for t in store.trials() if t.role in (TrialRole.ab_a, TrialRole.ab_b)]
    side_of = {"ab_a": "A", "ab_b": "B"}
    runs = store.runs()
    ok_runs = [r for r in runs if r.outcome == str(Outcome.ok)]
    by_side = {s: [t for t in trials if side_of[t.role] == s] for s in SIDES}
    scenarios = [s.name for s in spec.workload.scenarios]
    if any(r.scenario == prefix_reuse.SCENARIO_NAME for r in ok_runs):
        scenarios.append(prefix_reuse.SCENARIO_NAME)
    rows = []
    for scenario in scenarios:
        names = REUSE_METRICS if scenario == prefix_reuse.SCENARIO_NAME else metrics
        for metric in names:
            groups = [boot_values(by_side[s], ok_runs, scenario, metric) for s in SIDES]
            rows.append(_compare(scenario, metric, groups[0], groups[1], spec.workload.alpha,
                                 spec.workload.replicates.max))
    rows = _holm(rows, spec.workload.alpha, spec.workload.min_effect_pct)
    boots = [BootSummary(t.seq, side_of[t.role], t.outcome or "running",
                         t.boot_facts.engine_version if t.boot_facts else None,
                         t.boot_s, len([r for r in ok_runs if r.trial_id == t.id])) for t in trials]
    reuse = [_reuse(s, by_side[s], ok_runs, 1 - spec.workload.alpha) for s in SIDES]
    return AbAnalysis(
        rows=rows, reuse=[x for x in reuse if x is not None], boots=boots,
        commands={s: " ".join(spec.side(s).engine.command) for s in SIDES},
        alpha=spec.workload.alpha, min_effect_pct=spec.workload.min_effect_pct,
        versions={s: sorted({b.version for b in boots if b.side == s and b.version}) for s in SIDES},
        engines={s: profile_for(spec.side(s).engine.kind).label for s in SIDES},
        config=config_differences(store, spec, by_side),
        machines=machine_lines(trials),
    )


def config_differences(store: StudyStore, spec: AbSpec, by_side: dict[str, list[Trial]]) -> ConfigDiff:
    """Each side's boot facts (its boots in order) and parser defaults (stored at the start) compared."""
    stored = store.get_meta_json(DEFAULTS_META_KEY) or {}
    sides = {s: SideConfig(facts=[t.boot_facts for t in sorted(by_side[s], key=lambda t: t.seq) if t.boot_facts],
                           defaults=EngineDefaults.model_validate(stored[s]) if s in stored else None,
                           requested=spec.side(s).baseline_config())
             for s in SIDES}
    return diff_sides(sides)


def machine_lines(trials: Sequence[Trial]) -> list[str]:
    """What the A/B was measured on (the first recorded boot's machine), and each boot whose
    machine differs from it (power limit, clocks, driver, GPU model): read its rows with care."""
    recorded = [t for t in trials if t.machine is not None]
    if not recorded:
        return []
    first = recorded[0].machine
    assert first is not None
    out = [f"measured on {first.label()}"]
    for t in recorded[1:]:
        assert t.machine is not None
        if found := differences(first, t.machine):
            out.append(f"boot #{t.seq} ran on another machine than boot #{recorded[0].seq}: {'; '.join(found)}")
    return out


def boot_values(trials: Sequence[Trial], ok_runs: Sequence[Run], scenario: str, metric: str) -> list[list[float]]:
    """Per boot (trial), the metric's replicate values: positive and finite only (the log scale)."""
    out = []
    for trial in trials:
        values = [float(r.summary[metric]) for r in ok_runs if r.trial_id == trial.id and r.scenario == scenario
                  and isinstance(r.summary.get(metric), int | float) and math.isfinite(r.summary[metric])
                  and r.summary[metric] > 0]
        if values:
            out.append(values)
    return out


def _direction(metric: str) -> bool:
    return metric not in _LOWER_IS_BETTER and higher_is_better(metric)


def _compare(scenario: str, metric: str, a: list[list[float]], b: list[list[float]], alpha: float,
             replicates: int) -> AbRow:
    if not a or not b:
        return AbRow(scenario, metric, None, note=f"no measured boot of {'A' if not a else 'B'}")
    components = variance_components([a, b])
    if not components.rep_df and not components.boot_df:
        return AbRow(scenario, metric, None, note="one value per side: needs 2 replicates or 2 boots")
    comparison = compare_boots(a, b, components, higher_is_better=_direction(metric), confidence=1 - alpha)
    need = boots_needed(components, effect_pct=TARGET_EFFECT_PCT, replicates=replicates, alpha=alpha)
    return AbRow(scenario, metric, comparison, boots_for_target=need)


def _holm(rows: list[AbRow], alpha: float, min_effect_pct: float) -> list[AbRow]:
    """One family: every compared (scenario, metric) of the A/B."""
    compared = [(i, r.comparison) for i, r in enumerate(rows) if r.comparison is not None]
    adjusted: list[float] = holm([c.p_value for _, c in compared]).tolist() if compared else []
    out = list(rows)
    for (i, c), p in zip(compared, adjusted):
        v = verdict(c, alpha, float(p), min_effect_pct)
        out[i] = replace(rows[i], adjusted_p=float(p), verdict=label(v, min(c.n_baseline, c.n_candidate)))
    return out


def _reuse(side: str, trials: Sequence[Trial], ok_runs: Sequence[Run], confidence: float) -> ReuseSide | None:
    ids = {t.id for t in trials}
    cold: list[float] = []
    warm: list[float] = []
    for run in ok_runs:
        if run.trial_id in ids and run.scenario == prefix_reuse.SCENARIO_NAME:
            cold += run.summary.get("cold_ttft_ms", [])
            warm += run.summary.get("warm_ttft_ms", [])
    pairs = [(c, w) for c, w in zip(cold, warm) if c > 0 and w > 0]
    if not pairs:
        return None
    # Pairs pooled over boots: both sends of a pair share their boot's luck, which the ratio cancels.
    return ReuseSide(side, *(geometric_mean_ci(x, confidence) for x in
                             ([w / c for c, w in pairs], [c for c, _ in pairs], [w for _, w in pairs])))
