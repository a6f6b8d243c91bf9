"""From the store to conclusions: objective samples, CIs, effects vs baseline, the winner.

Objective samples are per replicate: each scenario's objective metric divided by the
baseline's reference value for that scenario (inverted for latency metrics), then combined
across scenarios (weighted or worst case). The reference is the pooled baseline mean; when
the baseline re-measurements show a significant trend over time (machine drift), it is the
fitted linear trend at the trial's start time instead.

Slots (several trials at once, `parallel.slots`): every slot measures the baseline itself (its
first trial) and re-measures it every `baseline_every` of its candidates, so the reference above
is kept per slot: a trial's samples are divided by the baseline measured on its own slot, with
drift fitted on that slot's timeline. The objective is thus a ratio to the baseline on the same
GPUs / cores, and a slot that is faster or slower as a whole (another GPU, a noisier core) cancels
out of every comparison. A slot whose baseline was never measured falls back to the pooled
reference of all slots. The boot-level model below then pools the per-slot ratios: boots on
different slots are different boots, so what is left of slot-to-slot difference enters as
boot-to-boot variance, never as an effect. The per-metric effects in the report (raw TTFT,
throughput, ...) pool the baseline's boots of all slots.

Every verdict rests on a two-level model (stats.hierarchy): boots nested in configs, the
boot-to-boot variance estimated from every config booted more than once (the baseline and its
re-measurements always are) and used for single-boot configs too. A config measured on one boot
can only be promising / not promising; better / worse needs boots on both sides, and is tested
at the selection-calibrated critical value of the design the study ran (analysis/verdict_rule.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from .. import stats
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..engine.placement import server_gpus
from ..errors import ServetuneError
from ..load.classes import class_names
from ..load.records import RunSummary, resolve
from ..search.base import SearchBase, TrialView
from ..store import BASELINE_ROLES, Run, StudyStore, Trial, TrialRole, TrialState
from ..study.metrics import CAPACITY, GOODPUT, higher_is_better
from ..study.objective import Objective
from ..study.spec import StudySpec
from ..vocabulary import Outcome
from . import class_proof, machine_check, pool_evidence, screening, slo_proof
from .capacity_runs import censored_value, censoring, is_level_run
from .eta import for_study, stored_seed, trials_s
from .known import DEFAULTS_META
from .types import (
    ClassResult,
    ConfigResult,
    DriftPoint,
    Effect,
    Energy,
    Estimate,
    ScenarioResult,
    SloCheck,
    SloState,
    StudyAnalysis,
    worst_state,
)
from .verdict_rule import Judged, StudyDesign, judge, revalidation_cap

REPORTED_METRICS = (
    "output_throughput", "request_throughput", GOODPUT, "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms",
    CAPACITY,
)


@dataclass(frozen=True)
class _Measured:
    """Usable runs of one trial: {scenario: {replicate: summary}}, and which scenarios' capacity
    is censored on this boot (right: at least the value; left: at most)."""

    trial: Trial
    by_scenario: dict[str, dict[int, RunSummary]]
    server: dict[str, dict[int, dict[str, Any]]]
    censored: dict[str, str] = field(default_factory=dict)
    records: dict[str, dict[int, str | None]] = field(default_factory=dict)   # each run's request records

    def objective_censoring(self, scenarios: Sequence[str]) -> str:
        """How this boot's objective is censored: it grows with each scenario's capacity, so a
        lower bound of one makes it a lower bound (right), an upper bound an upper one (left)."""
        return combine_censoring(self.censored.get(s, "") for s in scenarios)


def combine_censoring(kinds: Iterable[str]) -> str:
    present = {k for kind in kinds for k in (("right", "left") if kind == "both" else (kind,)) if k}
    return "both" if len(present) == 2 else next(iter(present), "")


def _measured_all(trials: Sequence[Trial]) -> list[_Measured]:
    """Every trial's usable runs; a trial measured on a machine unlike its baseline's has none
    (machine_check.py: it stays in the store and the report, out of every estimate)."""
    excluded = machine_check.unlike(trials)
    return [_Measured(t, {}, {}) if t.id in excluded else _measured(t) for t in trials]


def _measured(trial: Trial) -> _Measured:
    """A boot kept out of the verdict (analysis/outliers.py) measured nothing as far as any reader goes."""
    if trial.exclusion is not None:
        return _Measured(trial, {}, {})
    by_scenario: dict[str, dict[int, RunSummary]] = defaultdict(dict)
    server: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    records: dict[str, dict[int, str | None]] = defaultdict(dict)
    censored: dict[str, str] = {}
    for run in trial.runs:
        # A capacity search's load levels are not replicates: its capacity Run stands for them.
        if run.ok and not is_level_run(run.summary):
            summary = run.summary
            kind = censoring(summary) if CAPACITY in summary else ""
            if kind:   # the bound stands for the value; the statistics are told which side it bounds
                summary = summary.model_copy(update={CAPACITY: censored_value(summary)})
                censored[run.scenario] = kind
            by_scenario[run.scenario][run.replicate] = summary
            server[run.scenario][run.replicate] = run.server_stats
            records[run.scenario][run.replicate] = run.records_path
    return _Measured(trial, dict(by_scenario), dict(server), censored, dict(records))


# --- the baseline reference, drift-aware --------------------------------------------------

class Reference:
    """Baseline value of the objective metric per scenario, as a function of time."""

    def __init__(self, points: dict[str, list[tuple[float, float]]], alpha: float):
        self._const: dict[str, float] = {}
        self._trend: dict[str, tuple[float, float, float]] = {}
        for scenario, pts in points.items():
            values = np.array([v for _, v in pts])
            self._const[scenario] = float(values.mean()) if len(values) else math.nan
            if len(pts) >= 3:
                times = np.array([t for t, _ in pts])
                if np.ptp(times) > 0:
                    fit = scipy_stats.linregress(times, values)
                    if fit.pvalue < alpha:
                        self._trend[scenario] = (fit.intercept, fit.slope, float(times.mean()))

    @property
    def drift_detected(self) -> list[str]:
        return sorted(self._trend)

    def at(self, scenario: str, when: float) -> float:
        if scenario in self._trend:
            intercept, slope, _ = self._trend[scenario]
            return float(intercept + slope * when)
        return self._const.get(scenario, math.nan)


def _baseline_points(measured: list[_Measured], metric: str) -> list[DriftPoint]:
    """Every baseline boot's mean of `metric` per scenario, in trial order."""
    points = []
    for m in measured:
        if m.trial.role not in BASELINE_ROLES:
            continue
        for scenario, reps in m.by_scenario.items():
            values = [s[metric] for s in reps.values() if _finite(s.get(metric))]
            if values:
                points.append(DriftPoint(m.trial.id, m.trial.seq, m.trial.started_at, scenario, metric,
                                         float(np.mean(values))))
    return points


class SlotReferences:
    """The baseline reference of each slot (see the module docstring), pooled where a slot has none.
    With short screening (analysis/screening.py) `full` holds the references of the full-length runs:
    a search boot is divided by the baseline's short runs, a finalist's by the baseline's full
    ones, so what a shorter run reads differently cancels in every ratio."""

    def __init__(self, by_slot: dict[int, Reference], pooled: Reference, full: SlotReferences | None = None):
        self.by_slot = by_slot
        self.pooled = pooled
        self.full = full

    def for_trial(self, trial: Trial) -> Reference:
        if self.full is not None and trial.role.is_validation:
            return self.full.for_trial(trial)
        return self.by_slot.get(trial.slot, self.pooled)


def _reference(measured: list[_Measured], spec: StudySpec) -> SlotReferences:
    trial_of = {m.trial.id: m.trial for m in measured}
    points = _baseline_points(measured, spec.objective.metric)
    if not screening.is_short(spec):
        return _slot_references(points, trial_of, spec.alpha)
    short = _slot_references([p for p in points if not trial_of[p.trial_id].role.is_validation], trial_of, spec.alpha)
    full = _slot_references([p for p in points if trial_of[p.trial_id].role.is_validation], trial_of, spec.alpha)
    return SlotReferences(short.by_slot, short.pooled, full=full)


def _slot_references(points: list[DriftPoint], trial_of: dict[int, Trial], alpha: float) -> SlotReferences:
    pooled: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_slot: dict[int, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        pooled[p.scenario].append((p.at, p.value))
        by_slot[trial_of[p.trial_id].slot][p.scenario].append((p.at, p.value))
    return SlotReferences({slot: Reference(pts, alpha) for slot, pts in by_slot.items()}, Reference(pooled, alpha))


def objective_samples(m: _Measured, spec: StudySpec, references: SlotReferences) -> list[float]:
    """One objective value per replicate that measured every scored scenario."""
    objective = Objective(spec)
    names = objective.scored_scenarios
    replicates = sorted(set.intersection(*(set(m.by_scenario.get(n, {})) for n in names))) if names else []
    if not replicates:
        return []
    candidate = {n: [m.by_scenario[n][r] for r in replicates] for n in names}
    reference = references.for_trial(m.trial)
    refs = {n: reference.at(n, m.trial.started_at) for n in names}
    if not all(_finite(v) and v > 0 for v in refs.values()):
        return []
    # The reference enters as a one-run baseline whose value is the (drift-aware) baseline mean.
    baseline = {n: [{spec.objective.metric: refs[n]}] for n in names}
    share = per_gpu_share(m.trial.config, spec)
    return [x * share for x in objective.samples(candidate, baseline) if _finite(x)]


def per_gpu_share(config: Config, spec: StudySpec) -> float:
    """1 unless `objective.per_gpu`: then the baseline's GPUs per server over this config's, so
    that a config's objective (a ratio to the baseline) compares what each GPU serves."""
    if not spec.objective.per_gpu:
        return 1.0
    return server_gpus(spec.baseline_config()) / server_gpus(config)


# --- what the runner asks during a study --------------------------------------------------

def _all_measured(store: StudyStore) -> list[_Measured]:
    """Every trial's usable runs, from the store's one cached read (no query per trial)."""
    return _measured_all(store.trials())


def history(store: StudyStore, spec: StudySpec) -> list[TrialView]:
    """What the search strategies see: every finished candidate/baseline trial with its objective
    samples, then the candidates still running on other slots (pending, without samples). A trial
    is feasible unless an SLO of its config is violated (its interval wholly outside the limit,
    analysis/slo_proof.py): an unproven SLO stays in the search, as more boots may prove it, and
    only a config that meets every SLO can be named the winner."""
    return history_of(store.trials(), spec, store.path.parent)


def history_of(trials: Sequence[Trial], spec: StudySpec, study_dir: Path | None = None) -> list[TrialView]:
    """`history` of these trials only (a prefix of the study replays what a strategy saw then);
    `study_dir` resolves the runs' relative records paths."""
    measured = _measured_all(trials)
    reference = _reference(measured, spec)
    states = _slo_states([m for m in measured if m.trial.done], spec, study_dir)
    views = []
    running = [TrialView(params=m.trial.params, running=True, trial=m.trial) for m in measured
               if m.trial.role is TrialRole.candidate and not m.trial.done]
    for m in measured:
        if m.trial.role not in (TrialRole.baseline, TrialRole.candidate) or not m.trial.done:
            continue
        if m.trial.exclusion is not None:   # its config's re-boot stands for it
            continue
        samples = objective_samples(m, spec, reference) if m.trial.ok else []
        views.append(TrialView(
            params=m.trial.params,
            outcome=Outcome(m.trial.outcome or Outcome.crashed),
            samples=tuple(samples),
            feasible=m.trial.ok and states[m.trial.config.key()] is not SloState.violated,
            trial=m.trial,
        ))
    return views + running


def scored_trials(trials: Sequence[Trial], spec: StudySpec,
                  study_dir: Path | None = None) -> dict[int, tuple[list[float], bool]]:
    """Every done trial's objective samples and whether its config is feasible (no SLO violated),
    whatever its role (the baseline's re-measurements too): for reading a finished study as a
    table, as the replay benchmark does. The same samples and feasibility `history_of` gives the
    strategies."""
    measured = _measured_all(trials)
    reference = _reference(measured, spec)
    states = _slo_states([m for m in measured if m.trial.done], spec, study_dir)
    return {m.trial.id: (objective_samples(m, spec, reference) if m.trial.ok else [],
                         m.trial.ok and states[m.trial.config.key()] is not SloState.violated)
            for m in measured if m.trial.done}


def boot_objectives(trials: Sequence[Trial], spec: StudySpec) -> dict[str, list[tuple[Trial, float]]]:
    """Per config, each finished boot's mean objective (ratio to the baseline), in trial order:
    the values the outlier rule judges (analysis/outliers.py). Excluded boots are left out, and so are
    boots whose objective is a bound (a censored capacity): a bound is no value to be far from."""
    measured = [_measured(t) for t in trials]
    reference = _reference(measured, spec)
    scored = Objective(spec).scored_scenarios
    out: dict[str, list[tuple[Trial, float]]] = defaultdict(list)
    for m in measured:
        if m.trial.ok and m.trial.exclusion is None and not m.objective_censoring(scored):
            samples = objective_samples(m, spec, reference)
            if samples:
                out[m.trial.config.key()].append((m.trial, float(np.mean(samples))))
    return dict(out)


def enough_replicates(store: StudyStore, spec: StudySpec, trial: Trial, replicates_done: int) -> bool:
    if replicates_done >= spec.replicates.max:
        return True
    measured = _all_measured(store)
    reference = _reference(measured, spec)
    current = next(m for m in measured if m.trial.id == trial.id)
    samples = objective_samples(current, spec, reference)
    baseline = [x for m in measured if m.trial.role in BASELINE_ROLES and m.trial.id != trial.id
                for x in objective_samples(m, spec, reference)]
    decision = stats.replication_decision(
        samples, baseline or None,
        min_reps=spec.replicates.min, max_reps=spec.replicates.max,
        target_rel_half_width=spec.replicates.target_rel_ci or 0.02, higher_is_better=True,
    )
    return decision.stop


def pick_finalists(store: StudyStore, spec: StudySpec, k: int) -> list[str]:
    """The best few feasible candidates whose objective point estimate beats the baseline; one that
    racing stopped as clearly worse is never among them."""
    result = analyze(store, spec)
    ranked = [(c.key, c.objective.estimate) for c in result.configs
              if not c.is_baseline and c.ok and c.feasible and c.stopped_early is None
              and c.objective is not None and c.objective.estimate > 1.0]
    ranked.sort(key=lambda r: r[1], reverse=True)
    return [key for key, _ in ranked[:k]]


def planned_trial_count(store: StudyStore, spec: StudySpec) -> int:
    """Trials this study is expected to run in all: done + what the budget and plan still allow."""
    trials = store.trials()
    plan = store.final_plan()
    candidates = len([t for t in trials if t.role is TrialRole.candidate])
    if plan is not None:  # search over
        return len([t for t in trials if not t.role.is_validation]) + len(plan)
    size = search_size(spec)
    return trial_count(spec, max(min(spec.budget.trials or 10**6, size), candidates))


def trial_count(spec: StudySpec, candidates: int) -> int:
    """Boots of a study whose search boots `candidates`: a baseline per slot, the re-measurements
    between candidates, and each finalist with its fresh baseline."""
    every = max(spec.baseline_every, 1)
    # A re-measurement is booted before the next candidate, so none follows the last one.
    checks = max(candidates - 1, 0) // every
    return spec.parallel.slots + candidates + checks + 2 * spec.finalists


def remaining_s(store: StudyStore, spec: StudySpec) -> float:
    """Seconds the planned trials not yet done should take, from measured boot and run times."""
    trials = store.trials()
    eta = for_study(spec, trials, store.runs(), stored_seed(store))
    done = sum(t.done for t in trials)
    left = max(planned_trial_count(store, spec) - done, 0)
    validation_left = max(2 * spec.finalists - sum(t.done and t.role.is_validation for t in trials), 0)
    return trials_s(spec, eta, left, validation_left, spec.parallel.slots)


def search_size(spec: StudySpec) -> int:
    """How many candidates the strategy can propose at most (optuna: the trial budget)."""
    if spec.strategy == "baseline" or not spec.space:
        return 0
    values = {name: p.enumerate(name) if p.enumerable(name) else () for name, p in spec.space.items()}
    # A value the baseline already sets is not a candidate; a flag it leaves unset has no such value.
    base = SearchBase(spec).baseline_params()
    if spec.strategy == "ofat":
        return sum(len([v for v in vs if v != base.get(name)]) for name, vs in values.items())
    if spec.strategy == "grid":
        baseline_in_grid = all(name in base and base[name] in vs for name, vs in values.items())
        return int(np.prod([len(vs) for vs in values.values()])) - baseline_in_grid
    return spec.budget.trials or 20


# --- the conclusion -----------------------------------------------------------------------

def analyze(store: StudyStore, spec: StudySpec, extra_metrics: Sequence[str] = ()) -> StudyAnalysis:
    """The study's conclusion; `extra_metrics` are estimated per config and scenario beside the
    metrics the study names (metric_names)."""
    measured = _all_measured(store)
    reference = _reference(measured, spec)
    baseline_key = spec.baseline_config().key()

    groups: dict[str, list[_Measured]] = defaultdict(list)
    for m in measured:
        groups[m.trial.config.key()].append(m)

    metrics = _MetricModel.of(groups, spec, extra_metrics)
    design = study_design(groups, spec, baseline_key, revalidation_cap(store))

    excluded = machine_check.unlike([m.trial for m in measured])
    energy = _energy(groups, excluded, spec)
    configs: list[ConfigResult] = []
    for key, group in groups.items():
        config = _config_result(key, group, spec, reference, metrics, baseline_key, design, store.path.parent)
        config.unlike_machine = {m.trial.id: excluded[m.trial.id] for m in group if m.trial.id in excluded}
        config.energy = energy.get(key, {})
        configs.append(config)
    configs.sort(key=lambda c: (not c.is_baseline, min(c.trial_ids)))
    baseline = next((c for c in configs if c.is_baseline), None)

    components = objective_components(configs)
    if baseline is not None and baseline.objective_boots:
        _objective_effects([c for c in configs if not c.is_baseline], baseline, spec, components, design)
    winner, reason = _winner(configs, spec, _stored_defaults(store))
    if winner is None and not components.known and any(c.objective_boots for c in configs if not c.is_baseline):
        remedy = ("with finalists: 0 nothing is re-booted; finalists >= 1 or a smaller baseline_every boots "
                  "the baseline again" if spec.finalists == 0 else "a smaller baseline_every boots the baseline again")
        reason = f"no verdict: boot-to-boot variance is unknown, no config was measured on two boots ({remedy})"
    if baseline is None or not baseline.measured:
        winner, reason = None, _unmeasured_baseline_reason(store, configs, baseline_key)
    return StudyAnalysis(
        study_name=spec.name,
        objective_metric=spec.objective.metric, objective_per_gpu=spec.objective.per_gpu,
        objective_direction="maximize" if spec.objective.maximizing else "minimize",
        baseline=baseline,
        configs=configs,
        winner=winner,
        winner_reason=reason,
        drift=_baseline_points(measured, spec.objective.metric),
        cost=_cost(store),
        confidence=_confidence(spec),
        components=components,
    )


def study_design(groups: dict[str, list[_Measured]], spec: StudySpec, baseline_key: str, max_boots: int) -> StudyDesign:
    """The design the verdict is calibrated for: candidates measured in the search, the baseline's
    boots before the finalists were picked, the study's finalists and re-validation cap."""
    screened = sum(1 for key, group in groups.items() if key != baseline_key
                   and any(m.by_scenario and m.trial.role is TrialRole.candidate for m in group))
    screen_boots = sum(1 for m in groups.get(baseline_key, []) if m.by_scenario
                       and m.trial.role is not TrialRole.baseline_final)
    return StudyDesign(screened=max(screened, 1), finalists=spec.finalists,
                       baseline_screen_boots=max(screen_boots, 1), max_boots=max_boots)


def _confidence(spec: StudySpec) -> float:
    """Intervals at the level the verdicts use: a 1 - alpha interval excludes 0 % exactly when p < alpha."""
    return 1.0 - spec.alpha


def objective_components(configs: list[ConfigResult]) -> stats.VarianceComponents:
    """Boot and replicate variance of the objective, from every measured config's uncensored boots
    (a capacity that is only a bound is no value to measure spread with)."""
    return stats.variance_components([b for b in (_exact(c.objective_boots, c.objective_censored) for c in configs)
                                      if b])


def _exact(boots: list[list[float]], censored: Sequence[str]) -> list[list[float]]:
    """The boots whose value is a value, not a bound (censored lists align with boots; a missing one: exact)."""
    return [b for i, b in enumerate(boots) if not (censored[i] if i < len(censored) else "")]


# --- boots of one config, per metric --------------------------------------------------------

MetricBoots = dict[tuple[str, str], list[list[float]]]   # (scenario, metric) -> per boot, replicate values
MetricCensoring = dict[tuple[str, str], list[str]]       # (scenario, metric) -> per boot, "" / right / left


def metric_names(spec: StudySpec, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The metrics a study's analysis estimates: the reported ones, every SLO's and every profile's
    objective and SLOs (analysis/profiles.py), and `extra` (the axes `servetune pareto` asks for)."""
    slo_keys = [k for o in [spec.objective, *spec.profiles.values()] for name in spec.scenario_names
                for k in o.slo_for(name)]
    profile_metrics = [p.metric for p in spec.profiles.values()]
    return tuple(dict.fromkeys([*REPORTED_METRICS, *slo_keys, *profile_metrics, *extra]))


@dataclass(frozen=True)
class _MetricModel:
    """Per config, each (scenario, metric)'s boots and which are bounds; per (scenario, metric),
    the variance components over every config's exact boots."""

    names: tuple[str, ...]
    boots: dict[str, MetricBoots]
    censored: dict[str, MetricCensoring]
    components: dict[tuple[str, str], stats.VarianceComponents]

    @classmethod
    def of(cls, groups: dict[str, list[_Measured]], spec: StudySpec, extra: Sequence[str] = ()) -> _MetricModel:
        names = metric_names(spec, extra)
        boots = {key: _metric_boots(group, names) for key, group in groups.items()}
        censored = {key: _metric_censoring(group, names) for key, group in groups.items()}
        return cls(names, boots, censored, _metric_components(boots, censored))

    def estimates(self, key: str, group: list[_Measured], scenario: str, spec: StudySpec) -> dict[str, Estimate]:
        """The config's estimate of every metric measured in `scenario`."""
        values = _metric_samples(group, self.names).get(scenario, {})
        return {k: _metric_estimate(v, self.boots[key].get((scenario, k)),
                                    self.censored[key].get((scenario, k), []),
                                    self.components.get((scenario, k)), spec)
                for k, v in values.items()}


def _metric_boots(group: list[_Measured], names: Sequence[str]) -> MetricBoots:
    out: MetricBoots = defaultdict(list)
    for m in group:
        for scenario, metric, values in _boot_values(m, names):
            out[(scenario, metric)].append(values)
    return dict(out)


def _metric_censoring(group: list[_Measured], names: Sequence[str]) -> MetricCensoring:
    """Aligned with _metric_boots: which boots' values are bounds (a censored capacity)."""
    out: MetricCensoring = defaultdict(list)
    for m in group:
        for scenario, metric, _ in _boot_values(m, names):
            out[(scenario, metric)].append(m.censored.get(scenario, "") if metric == CAPACITY else "")
    return dict(out)


def _boot_values(m: _Measured, names: Sequence[str]) -> Iterator[tuple[str, str, list[float]]]:
    for scenario, reps in m.by_scenario.items():
        for metric in names:
            values = [float(s[metric]) for s in reps.values() if _finite(s.get(metric)) and s[metric] > 0]
            if values:
                yield scenario, metric, values


def _metric_components(metric_boots: dict[str, MetricBoots], censored: dict[str, MetricCensoring],
                       ) -> dict[tuple[str, str], stats.VarianceComponents]:
    """Per (scenario, metric): variance components over every config's uncensored boots."""
    names = {name for boots in metric_boots.values() for name in boots}
    return {name: stats.variance_components([exact for key, b in metric_boots.items() if name in b
                                             if (exact := _exact(b[name], censored[key][name]))])
            for name in names}


def _metric_samples(group: list[_Measured], names: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """{scenario: {metric: per-replicate values}} pooled over the group's trials."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in group:
        for scenario, reps in m.by_scenario.items():
            for summary in reps.values():
                for metric in names:
                    if _finite(summary.get(metric)):
                        out[scenario][metric].append(float(summary[metric]))
    return out


def _slo_checks(group: list[_Measured], scenario: str, estimates: dict[str, Estimate], spec: StudySpec,
                study_dir: Path | None) -> list[SloCheck]:
    """Every SLO of `scenario` judged on the config's runs there (analysis/slo_proof.py), its traffic
    classes' own after them (analysis/class_proof.py); none where the config has no run of it."""
    limits = spec.objective.slo_for(scenario)
    if not estimates:
        return []
    if limits and spec.objective.metric == CAPACITY:
        return [slo_proof.capacity_check(scenario, estimates.get(CAPACITY))]
    checks = slo_proof.check_scenario(scenario, limits, _record_paths(group, scenario, study_dir),
                                      estimates, spec.alpha) if limits else []
    return checks + [c for r in _class_results(group, scenario, spec, study_dir) for c in r.slo_checks]


def _record_paths(group: list[_Measured], scenario: str, study_dir: Path | None) -> list[Path] | None:
    """The request records of the config's runs of `scenario` in the order measured; None where any is missing."""
    stored = [m.records.get(scenario, {}).get(r) for m in sorted(group, key=lambda m: m.trial.seq)
              for r in sorted(m.by_scenario.get(scenario, {}))]
    paths = [resolve(p, study_dir) for p in stored]
    records = [p for p in paths if p is not None]
    return records if len(records) == len(paths) else None


def _class_results(group: list[_Measured], scenario: str, spec: StudySpec,
                   study_dir: Path | None) -> list[ClassResult]:
    """A mixed scenario's classes on the config, each with its statistics and SLOs; none otherwise."""
    limits = spec.objective.class_slo_for(scenario)
    try:
        classes = class_names(next(s for s in spec.scenarios if s.name == scenario))
    except ServetuneError:   # a trace no longer where it was: the classes its SLOs name
        classes = list(limits)
    if not classes or not any(m.by_scenario.get(scenario) for m in group):
        return []
    return class_proof.class_results(scenario, classes, limits, _record_paths(group, scenario, study_dir),
                                     spec.alpha)


def _slo_states(measured: list[_Measured], spec: StudySpec, study_dir: Path | None) -> dict[str, SloState]:
    """Every config's worst SLO state over its scenarios, judged as `analyze` judges it."""
    groups: dict[str, list[_Measured]] = defaultdict(list)
    for m in measured:
        groups[m.trial.config.key()].append(m)
    model = _MetricModel.of(groups, spec)
    out = {}
    for key, group in groups.items():
        checks = [c for name in spec.scenario_names
                  for c in _slo_checks(group, name, model.estimates(key, group, name, spec), spec, study_dir)]
        out[key] = worst_state(checks)
    return out


def _config_result(key: str, group: list[_Measured], spec: StudySpec, reference: SlotReferences,
                   metrics: _MetricModel, baseline_key: str, design: StudyDesign,
                   study_dir: Path | None) -> ConfigResult:
    is_baseline = key == baseline_key
    metric_boots, metric_censored, metric_components = metrics.boots, metrics.censored, metrics.components
    first = group[0].trial
    outcomes = [m.trial.outcome for m in group if m.trial.done and m.trial.outcome is not None]
    ok = any(o is Outcome.ok for o in outcomes)
    scored = Objective(spec).scored_scenarios
    boots = [(s, m.objective_censoring(scored)) for m in group
             if (s := objective_samples(m, spec, reference)) and min(s) > 0]
    per_boot = [s for s, _ in boots]
    samples = [x for s in per_boot for x in s]
    samples_by_scenario = _metric_samples(group, metrics.names)
    scenarios: dict[str, ScenarioResult] = {}
    for scenario in spec.scenarios:
        values = samples_by_scenario.get(scenario.name, {})
        estimates = metrics.estimates(key, group, scenario.name, spec)
        result = ScenarioResult(
            scenario=scenario.name,
            replicates=max((len(v) for v in values.values()), default=0),
            metrics=estimates,
            server=_server_means(group, scenario.name),
            slo_checks=_slo_checks(group, scenario.name, estimates, spec, study_dir),
            classes=_class_results(group, scenario.name, spec, study_dir),
        )
        if not is_baseline:
            for metric in values:
                name = (scenario.name, metric)
                base = metric_boots.get(baseline_key, {}).get(name)
                cand = metric_boots[key].get(name)
                if base and cand and metric_components[name].known:
                    censored = _effect_censoring(metric_censored[baseline_key].get(name, []),
                                                 metric_censored[key].get(name, []))
                    result.effects[metric] = _effect(metric, base, cand, metric_components[name], spec, design,
                                                     censored)
        scenarios[scenario.name] = result
    return ConfigResult(
        key=key,
        config=first.config,
        params=first.params,
        label=first.config.label(spec.baseline_config()),
        trial_ids=[m.trial.id for m in group],
        outcome=Outcome.ok if ok else (outcomes[-1] if outcomes else TrialState.running),
        unfinished_trial_ids=[m.trial.id for m in group if not m.trial.done],
        scenarios=scenarios,
        objective=_estimate(samples, spec) if samples else None,
        objective_samples=samples,
        objective_boots=per_boot,
        objective_censored=[c for _, c in boots],
        boot_samples=[float(np.mean(s)) for s in per_boot],
        feasible=ok and worst_state(c for s in scenarios.values() for c in s.slo_checks) is not SloState.violated,
        is_baseline=is_baseline,
        is_finalist=any(m.trial.role is TrialRole.finalist for m in group),
        stopped_early=next((m.trial.stopped_early for m in group if m.trial.stopped_early), None),
    )


def _objective_effects(candidates: list[ConfigResult], baseline: ConfigResult, spec: StudySpec,
                       components: stats.VarianceComponents, design: StudyDesign) -> None:
    """Objective vs baseline for every candidate (two-level model) under the verdict rule.

    Replicates on one boot share that boot's luck (placement, compile, thermal state), so every
    comparison carries the study's boot-to-boot variance once per boot of each side. A config
    judged boot against boot is tested at the selection-calibrated critical value (no correction
    over single-boot candidates, which can never be named winner). The candidate's objective
    becomes its ratio to the baseline with that CI, and the baseline's is 1 by construction."""
    baseline.objective = Estimate(1.0, math.nan, math.nan, len(baseline.objective_samples))
    if not components.known:
        return
    for config in (c for c in candidates if c.objective_boots):
        judged = judge(baseline.objective_boots, config.objective_boots, components, design.calibrated(),
                       higher_is_better=True, alpha=spec.alpha)
        cmp = judged.comparison
        censored = _effect_censoring(baseline.objective_censored, config.objective_censored)
        config.objective_effect = _to_effect("objective", judged, spec, censored,
                                             boots=min(len(config.objective_boots), len(baseline.objective_boots)))
        config.objective = Estimate(1.0 + cmp.effect_pct / 100.0, 1.0 + cmp.ci_low_pct / 100.0,
                                    1.0 + cmp.ci_high_pct / 100.0, len(config.objective_samples), censored)


def joules_per_token(run: Run) -> float | None:
    """The slot's GPUs' energy over a run per output token it produced; None where either is unknown."""
    tokens = run.summary.get("total_output_tokens")
    energy = run.machine.energy_j if run.machine is not None else None
    if energy is None or not _finite(tokens) or tokens <= 0 or energy <= 0:
        return None
    return float(energy) / float(tokens)


def _energy(groups: dict[str, list[_Measured]], excluded: dict[int, list[str]],
            spec: StudySpec) -> dict[str, dict[str, Energy]]:
    """Per config and scenario, joules per output token with its interval: runs nested in boots,
    the boot variance pooled over every config (as `_metric_estimate` does for any metric)."""
    boots: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    sources: dict[str, set[str]] = defaultdict(set)
    for key, group in groups.items():
        for m in group:
            if m.trial.id in excluded:
                continue
            per_scenario: dict[str, list[float]] = defaultdict(list)
            for run in m.trial.runs:
                value = joules_per_token(run) if run.ok and not is_level_run(run.summary) else None
                if value is not None and run.machine is not None:
                    per_scenario[run.scenario].append(value)
                    sources[key].add(run.machine.energy_source or "")
            for scenario, values in per_scenario.items():
                boots[scenario][key].append(values)
    out: dict[str, dict[str, Energy]] = defaultdict(dict)
    for scenario, by_key in boots.items():
        components = stats.variance_components(list(by_key.values()))
        for key, config_boots in by_key.items():
            values = [v for b in config_boots for v in b]
            j = _metric_estimate(values, config_boots, [], components, spec)
            out[key][scenario] = Energy(j, _reciprocal(j), len(config_boots), ", ".join(sorted(sources[key] - {""})))
    return dict(out)


def _reciprocal(e: Estimate) -> Estimate:
    """1/x of a positive estimate: its interval's ends swap."""
    def inv(x: float) -> float:
        return 1.0 / x if _finite(x) and x > 0 else math.nan
    return Estimate(inv(e.estimate), inv(e.high), inv(e.low), e.n)


def _effect_censoring(baseline: Sequence[str], candidate: Sequence[str]) -> str:
    """How a higher-is-better effect computed from bounds is censored: a candidate at least its
    value or a baseline at most its own make the effect a lower bound (right); the other way, an
    upper bound (left)."""
    flip = {"right": "left", "left": "right", "both": "both", "": ""}
    return combine_censoring([*candidate, *(flip[k] for k in baseline)])


def _to_effect(metric: str, judged: Judged, spec: StudySpec, censored: str = "", *, boots: int) -> Effect:
    """The effect and its label. On bounds (a censored capacity) a label is kept only where the
    bound errs against it: better on a lower bound of the effect, worse on an upper one."""
    cmp = judged.comparison
    v = stats.verdict(cmp, alpha=spec.alpha, adjusted_p=judged.p_adjusted, min_effect_pct=spec.min_effect_pct)
    if v is not stats.Verdict.no_difference and censored:
        ratio_up = (v is stats.Verdict.better) == cmp.higher_is_better   # the verdict says candidate > baseline
        if censored != ("right" if ratio_up else "left"):
            v = stats.Verdict.no_difference
    return Effect(metric=metric, effect_pct=cmp.effect_pct, ci_low_pct=cmp.ci_low_pct,
                  ci_high_pct=cmp.ci_high_pct, p_value=cmp.p_value, p_adjusted=judged.p_adjusted,
                  verdict=stats.label(v, boots), unit="boot" if boots >= 2 else "single_boot",
                  t=judged.t, critical=judged.critical, level=judged.level, df=judged.df, censored=censored)


def _stored_defaults(store: StudyStore) -> EngineDefaults:
    """The engine's argument defaults the study read at its start (none kept: nothing known)."""
    raw = store.get_meta_json(DEFAULTS_META)
    return EngineDefaults.model_validate(raw) if raw is not None else EngineDefaults()


def _winner(configs: list[ConfigResult], spec: StudySpec,
            defaults: EngineDefaults) -> tuple[ConfigResult | None, str]:
    """Only re-validated configs may win: a candidate measured on one boot carries that boot's luck
    and the luck of being picked for it. `finalists: 0` screens only, so it names no winner. A
    winner meets every SLO: each interval, pooled over its boots, inside the limit (slo_proof.py);
    a finalist proven better whose SLO is unproven is named as such, not as the winner."""
    if spec.finalists == 0:
        labels = [c.objective_effect.verdict for c in configs if not c.is_baseline and c.objective_effect is not None]
        screened, promising = labels, [v for v in labels if v == "promising"]
        raced = sum(1 for c in configs if c.stopped_early)
        raced_text = f", {raced} stopped early: clearly worse" if raced else ""
        return None, (f"finalists: 0 screens only, so no winner is named: {len(screened)} candidate(s) screened, "
                      f"{len(promising)} promising{raced_text}; a promising one needs re-validation on fresh boots "
                      "(finalists >= 1) to be proven better")
    finalists = [c for c in configs if c.is_finalist]
    if not finalists:
        tried = len([c for c in configs if not c.is_baseline])
        return None, f"no config beat the baseline: {tried} tried, none was good enough to re-validate"
    better = [(c, c.objective_effect) for c in finalists if c.feasible and c.objective_effect is not None
              and c.objective_effect.verdict == "better" and c.objective_effect.unit == "boot"]
    good = [(c, eff) for c, eff in better if c.slo_state is SloState.met]
    if not good and better:
        best, eff = max(better, key=lambda g: g[0].objective.estimate if g[0].objective else -math.inf)
        open_slos = "; ".join(c.text() for c in best.slo_checks if c.state is not SloState.met)
        return None, (f"{best.label} beat the baseline ({_shown(eff)}) but does not meet every SLO at "
                      f"{100 * _confidence(spec):g} % confidence: {open_slos}")
    if not good:
        return None, (f"no config beat the baseline significantly after re-validation ({len(finalists)} finalist(s), "
                      f"selection-calibrated alpha {spec.alpha}, minimum effect {spec.min_effect_pct:g} %)")
    best, eff = max(good, key=lambda g: g[0].objective.estimate if g[0].objective else -math.inf)
    preferred = ""
    if spec.prefer_less_memory:
        best, eff, preferred = _least_memory_of_the_tied(best, eff, good, defaults)
    slos = (f"every SLO met at {100 * _confidence(spec):g} % confidence (each interval inside its limit)"
            if best.slo_checks else "no SLO set")
    return best, (f"objective {_shown(eff)} vs baseline, "
                  f"selection-calibrated p = {eff.p_adjusted:.3g} (at least {spec.min_effect_pct:g} % needed), "
                  f"{slos}{preferred}")


def _least_memory_of_the_tied(best: ConfigResult, eff: Effect, good: list[tuple[ConfigResult, Effect]],
                              defaults: EngineDefaults) -> tuple[ConfigResult, Effect, str]:
    """`prefer_less_memory`: the winners whose objective lies within the best one's interval are not
    told apart by the study; of those, the one that reserves the least memory."""
    if best.objective is None:
        return best, eff, ""
    low = best.objective.low if math.isfinite(best.objective.low) else best.objective.estimate
    tied = [(c, e) for c, e in good if c.objective is not None and c.objective.estimate >= low]
    chosen, chosen_eff = min(tied, key=lambda g: (pool_evidence.reserved_memory(g[0].config, defaults),
                                                  -(g[0].objective.estimate if g[0].objective else 0.0)))
    if chosen is best:
        return best, eff, ""
    return chosen, chosen_eff, (f"; preferred (prefer_less_memory) over {best.label}, whose objective it cannot be "
                                "told apart from (within its interval), as it reserves less memory")


def _shown(eff: Effect) -> str:
    """An objective effect with its interval (a censored capacity's: its lower bound)."""
    if eff.censored == "right":
        return f"at least {eff.effect_pct:+.1f}% (lower bound {eff.ci_low_pct:+.1f}: a censored capacity)"
    return f"{eff.effect_pct:+.1f}% [{eff.ci_low_pct:+.1f}, {eff.ci_high_pct:+.1f}]"


def _unmeasured_baseline_reason(store: StudyStore, configs: list[ConfigResult], baseline_key: str) -> str:
    """Why there is no verdict: what became of the baseline, and whether anything was measured at all."""
    trials = [t for t in store.trials() if t.config.key() == baseline_key and t.done]
    if trials:
        last = trials[-1]
        detail = (last.detail or "").strip().splitlines()
        why = f"baseline failed: {last.outcome}" + (f" — {detail[0][:200]}" if detail else "")
        if last.ok:
            why = "baseline booted but none of its runs produced a measurement"
    else:
        why = "the baseline never ran"
    measured = [c for c in configs if not c.is_baseline and c.measured]
    if not measured:
        return f"no trial produced a measurement ({why})"
    return f"{why}; nothing to compare the {len(measured)} measured candidate(s) against"


def _effect(metric: str, base: list[list[float]], cand: list[list[float]], components: stats.VarianceComponents,
            spec: StudySpec, design: StudyDesign, censored: str) -> Effect:
    judged = judge(base, cand, components, design.calibrated(),
                   higher_is_better=higher_is_better(metric), alpha=spec.alpha)
    return _to_effect(metric, judged, spec, censored, boots=min(len(base), len(cand)))


def _metric_estimate(values: list[float], boots: list[list[float]] | None, censored: list[str],
                     components: stats.VarianceComponents | None, spec: StudySpec) -> Estimate:
    """A config's metric: the mean over replicates with, once the study knows its boot variance, the
    interval from the pooled variance on the log scale (a time or a throughput stays positive; two
    boots' own 1-df interval is no interval); else the replicates' log-t interval. Censored boots
    make it a bound (no interval: the variance of a bound is not the value's)."""
    kind = combine_censoring(censored)
    if kind:
        return Estimate(float(np.mean(values)), math.nan, math.nan, len(values), kind)
    # A zero (no failed request) has no log: the boots then hold only some of the values.
    if boots and sum(map(len, boots)) == len(values) and components is not None and components.known:
        se = stats.log_mean_se(boots, components)
        t = float(scipy_stats.t.ppf(0.5 + _confidence(spec) / 2, components.boot_df))
        mean = float(np.mean(values))
        return Estimate(mean, mean * math.exp(-t * se), mean * math.exp(t * se), len(values))
    return _estimate(values, spec)


def _estimate(values: list[float], spec: StudySpec) -> Estimate:
    """Mean over replicates; a log-t interval, so a time or a throughput is never bounded below 0."""
    interval = stats.log_t_ci(values, _confidence(spec))
    return Estimate(interval.estimate, interval.low, interval.high, interval.n)


def _server_means(group: list[_Measured], scenario: str) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for m in group:
        for server in m.server.get(scenario, {}).values():
            for name, value in server.items():
                if _finite(value):
                    values[name].append(float(value))
    return {k: float(np.mean(v)) for k, v in values.items()}


def _cost(store: StudyStore) -> dict[str, float]:
    trials = store.trials()
    runs = [r for t in trials for r in t.runs]
    boot = sum(t.total_boot_s for t in trials)
    failed_boot = sum(((t.ended_at or t.started_at) - t.started_at) for t in trials if t.healthy_at is None)
    measure = sum(r.wall_s for r in runs)
    wall = store.elapsed_wall_s()
    return {"wall_s": wall, "boot_s": boot + failed_boot, "measure_s": measure,
            "other_s": max(wall - boot - failed_boot - measure, 0.0)}


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# --- power, before a study spends its boots -----------------------------------------------

@dataclass(frozen=True)
class Power:
    """What a study of this store's noise can detect (objective, ratio to the baseline)."""

    components: stats.VarianceComponents
    replicates: int                 # per boot (the study's minimum)
    baseline_boots: int             # the baseline's boots measured so far (at least 1)
    detectable_pct: float           # one candidate boot against those baseline boots (NaN: unknown)
    boots_for_target: int | None    # boots per side for target_pct (None: unknown or > 1000)
    target_pct: float
    power: float


def study_power(store: StudyStore, spec: StudySpec, *, target_pct: float = 10.0, power: float = 0.9) -> Power:
    """From the boot and replicate variances measured in the store: the effect one candidate boot can
    detect with ``power`` at the study's alpha, and the boots per side ``target_pct`` needs."""
    measured = _all_measured(store)
    reference = _reference(measured, spec)
    boots: dict[str, list[list[float]]] = defaultdict(list)
    for m in measured:
        samples = objective_samples(m, spec, reference)
        if samples and min(samples) > 0:
            boots[m.trial.config.key()].append(samples)
    components = stats.variance_components(list(boots.values()))
    reps = spec.replicates.min
    base_boots = max(len(boots.get(spec.baseline_config().key(), [])), 1)
    return Power(components, reps, base_boots,
                 stats.detectable_effect_pct(components, replicates=reps, boots=1, baseline_boots=base_boots,
                                             alpha=spec.alpha, power=power),
                 stats.boots_needed(components, effect_pct=target_pct, replicates=reps, alpha=spec.alpha,
                                    power=power),
                 target_pct, power)


def power_line(p: Power) -> str:
    """One line for `servetune status`."""
    c = p.components
    if not c.known:
        return ("power: unknown until a config (the baseline's re-measurement counts) is booted twice "
                "with >= 2 replicates")
    need = (f"{p.target_pct:g} % needs {p.boots_for_target} boot(s) of {p.replicates} replicate(s) on each side"
            if p.boots_for_target else f"{p.target_pct:g} % needs more than 1000 boots")
    return (f"power ({p.power:.0%}): with {p.replicates} replicate(s) x 1 boot a candidate's effect is detectable "
            f"from ±{p.detectable_pct:.1f} % (against the baseline's {p.baseline_boots} boot(s)); {need} "
            f"[boot sd {100 * math.sqrt(c.boot_var):.1f} %, replicate sd {100 * math.sqrt(c.rep_var):.1f} %, "
            f"from {c.boot_df} boot-level df{': a rough figure' if c.boot_df < 5 else ''}]")
