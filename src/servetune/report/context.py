"""Everything a report shows, gathered once from (StudyAnalysis, StudyStore) into plain data.

The Markdown and HTML renderers only format this; they compute nothing themselves.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import known
from ..analysis.class_proof import TABLE_KEYS
from ..analysis.revalidation import next_look
from ..analysis.types import ConfigResult, Effect, Estimate, SloCheck, SloState, StudyAnalysis
from ..analysis.verdict_rule import revalidation_cap
from ..engine.bootfacts import BootFacts
from ..engine.cache import CacheRecord
from ..engine.config import Config
from ..engine.knobs import KnobStatus
from ..engine.placement import Placement
from ..engine.provenance import ImageRef, parse_build
from ..engine.registry import PROFILES
from ..errors import ServetuneError
from ..secrets import Redactor
from ..server_evidence import Evidence
from ..store import EtaEntry, Run, StudyStore, Trial, TrialState
from ..study.metrics import GOODPUT, higher_is_better
from ..study.representative import speculative_warnings
from ..study.spec import CapacitySpec, ObjectiveSpec, StudySpec
from ..vocabulary import Outcome
from . import pareto, plots
from .advice import Advice, advise_config, describe_mismatch
from .capacity import CapacityView, build_capacity
from .classes import ClassRow, class_rows
from .emit import Deployment, Snippets, snippets
from .fidelity import FidelityRow, fidelity_rows
from .machine import MachineView, build_machine
from .prefill_sweep import SweepRow, sweep_rows
from .requests import resolve, runs_series_ms
from .roofline import RooflineView, build_roofline
from .speculative import AcceptanceRow, SweepPeak, acceptance_rows, sweep_peaks
from .templating import num

MAX_DISTRIBUTION_CONFIGS = 5
PARETO_PLOT = "pareto_front"   # drawn in its own section, not among the other plots
MIN_CONFIGS_FOR_IMPORTANCE = 12  # PED-ANOVA ranks by the top quantile: noise with fewer configs
# Log lines that say why a server failed (OOM, bad argument, context too long, crash).
_EXPLAINS = re.compile(r"error|exception|out of memory|oom|killed|invalid|maximum model length|"
                       r"not supported|unrecognized|traceback|failed|cannot|must be", re.IGNORECASE)
_HEADLINE_METRICS = ("output_throughput", "request_throughput", GOODPUT, "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                     "p99_itl_ms")


@dataclass
class MetricRow:
    scenario: str
    metric: str
    kind: str                      # objective | slo | metric
    baseline: Estimate | None
    winner: Estimate | None
    effect: Effect | None
    slo_limit: float | None = None
    slo_bound: str = ""            # "≤ 300" for a ceiling, "≥ 50" for a floor; "" without an SLO


@dataclass
class ConfigLine:
    label: str
    outcome: str
    trials: int
    objective: Estimate | None
    effect: Effect | None
    feasible: bool
    slo_violations: list[str]
    is_baseline: bool
    is_winner: bool
    not_applied: str = ""  # "not applied: env.X": what its verdict column says instead of an effect
    slo_state: str = ""              # met | unproven | violated; "" without an SLO or a measurement
    slo_open: list[str] = field(default_factory=list)   # "scenario metric" of each SLO not met


@dataclass
class SloRow:
    """One SLO of one scenario on one config, as judged (analysis/slo_proof.py)."""

    label: str
    check: SloCheck
    is_winner: bool = False


@dataclass
class TrialView:
    seq: int
    role: str
    label: str
    outcome: str
    detail: str | None
    log_lines: list[str]
    kv_cache_tokens: int | None
    max_concurrency: float | None
    startup_s: float | None
    engine_version: str | None  # its boot's ("0.11.0"; "SGLang 0.5.15" in a study of several engines)
    mismatches: list[str]
    knobs: list[str]  # each env knob: "env.X=v applied", "... not applied", "... unproven"
    knob_notes: list[str]  # why each knob that did not read applied reads so, with the log line
    runs_ok: int
    runs_total: int
    slot: str = ""  # which slot measured it ("slot 1 (cpus 1)"); shown when the study had several
    cache: str = "–"  # cold / warm / unknown, compile time, a wipe (engine/cache.py)
    excluded: str = ""  # why the boot is kept out of the verdict (analysis/outliers.py)


@dataclass
class ExclusionView:
    """A boot kept out of the verdict, why, and the boot on a wiped cache that replaced it."""

    seq: int
    role: str
    label: str
    why: str
    reboot_seq: int | None      # None: not booted yet (the study was stopped)
    reboot_outcome: str = ""
    reboot_cache: str = ""


@dataclass
class ProvenanceView:
    """What was measured: the engine's version and build, its image, the cache roots."""

    engines: list[str]          # each distinct version the boots logged, described (engine/provenance.py)
    images: list[ImageRef]      # the docker images the study's starts found
    cache_roots: list[str]      # the cache roots the boots got (a directory per slot)

@dataclass
class ParamEffectRow:
    parameter: str
    value: str
    effect: Effect | None
    objective: Estimate | None
    not_applied: bool = False  # the knob did not take effect: its row reads "not applied", never an effect


@dataclass
class EvidenceRow:
    label: str
    scenario: str
    evidence: Evidence


@dataclass
class CostView:
    wall_s: float
    boot_s: float
    measure_s: float
    other_s: float
    boots: int
    runs: int
    eta_error_pct: float | None
    eta_note: str


@dataclass
class ProfileView:
    """One profile's recommendation (analysis/profiles.py): the config best for its objective and SLOs
    under the study's verdict rule, or the baseline when none is proven, with the evidence."""

    name: str
    objective: str                                 # "minimize p90_ttft_ms"
    headline: str                                  # as the study's headline, under the profile's objective
    reason: str                                    # the verdict: effect, calibrated p, SLOs
    emitted_for: str                               # "winner" | "baseline" | ""
    slo_checks: list[SloCheck]                     # the emitted config's SLOs under the profile
    diff: list[tuple[str, str, str]]
    deployment: Deployment | None
    snippets: Snippets | None


@dataclass
class ParetoView:
    """The Pareto front section (report/pareto.py): its axes and each scenario's standings."""

    x: str
    y: str
    panels: list[pareto.Panel]
    plot: str = ""                                 # its figure's name among the plots ("": none drawn)


@dataclass
class ReportData:
    study_name: str
    objective_metric: str
    objective_per_gpu: bool
    objective_direction: str
    generated_at: float
    has_winner: bool
    headline: str
    winner_reason: str
    emitted_for: str                               # "winner" | "baseline" | ""
    config_heading: str                            # the recommended-config section's title
    metric_rows: list[MetricRow]
    configs: list[ConfigLine]
    diff: list[tuple[str, str, str]]               # name, baseline value, emitted value
    deployment: Deployment | None
    snippets: Snippets | None
    trials: list[TrialView]
    slotted: bool                                  # trials ran on more than one slot: the table says where
    param_effects: list[ParamEffectRow]
    importances: dict[str, float]
    plots: list[plots.Plot]
    evidence: list[EvidenceRow]
    advice: list[Advice]
    cost: CostView
    notes: list[str] = field(default_factory=list)
    confidence_pct: str = "95"                    # level of every interval shown: 1 - the study's alpha
    acceptance: list[AcceptanceRow] = field(default_factory=list)   # speculative decoding, per config and scenario
    sweep_peaks: list[SweepPeak] = field(default_factory=list)      # the best num_speculative_tokens per scenario
    capacity: CapacityView | None = None          # a `maximize: capacity` study's section
    roofline: RooflineView | None = None          # decode TPOT against the bandwidth floor
    fidelity: list[FidelityRow] = field(default_factory=list)  # how faithfully each run sent its traffic
    prefill_sweep: list[SweepRow] = field(default_factory=list)  # per boot, each prompt size's TTFT or timeout
    slo_rows: list[SloRow] = field(default_factory=list)       # every SLO's interval and state per config
    class_rows: list[ClassRow] = field(default_factory=list)   # a mixed scenario's traffic classes apart
    class_columns: tuple[str, ...] = TABLE_KEYS                # the statistics each class row shows
    exclusions: list[ExclusionView] = field(default_factory=list)  # boots kept out of the verdict
    provenance: ProvenanceView | None = None
    engine_column: str = "vLLM"  # the trials table's engine-version column: the engine's label, "engine" for several
    machine: MachineView = field(default_factory=lambda: MachineView(recorded=False))  # what it was measured on
    profiles: list[ProfileView] = field(default_factory=list)   # one deployment per profile of the study
    pareto: ParetoView | None = None


def fmt_value(value: Any) -> str:
    if value is None:
        return "(default)"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def explaining_lines(log_tail: str | None, limit: int = 8) -> list[str]:
    """The lines of a failed server's log tail that say why; the last lines when none match."""
    if not log_tail:
        return []
    lines = [ln.rstrip() for ln in log_tail.splitlines() if ln.strip()]
    hits = [ln for ln in lines if _EXPLAINS.search(ln)]
    return (hits or lines)[-limit:]


def _spec(store: StudyStore) -> dict[str, Any]:
    return store.spec_doc() or {}


def _objective(spec: dict[str, Any]) -> ObjectiveSpec:
    """The study's objective (for its SLOs); an unreadable one counts as no SLOs."""
    try:
        return ObjectiveSpec.model_validate(spec.get("objective") or {})
    except ValueError:
        return ObjectiveSpec()


def _capacity_spec(spec: dict[str, Any]) -> CapacitySpec:
    """The study's capacity settings (how its levels were judged); unreadable ones: the defaults."""
    try:
        return CapacitySpec.model_validate(spec.get("capacity") or {})
    except ValueError:
        return CapacitySpec()


def _metric_rows(analysis: StudyAnalysis, subject: ConfigResult | None, objective: ObjectiveSpec) -> list[MetricRow]:
    base = analysis.baseline
    if base is None:
        return []
    rows: list[MetricRow] = []
    for scenario, b in base.scenarios.items():
        w = subject.scenarios.get(scenario) if subject is not None else None
        slo = objective.slo_for(scenario)
        names = [analysis.objective_metric, *slo, *(w.effects if w else {}), *_HEADLINE_METRICS]
        for name in dict.fromkeys(names):
            be = b.metrics.get(name)
            we = w.metrics.get(name) if w else None
            if be is None and we is None:
                continue
            kind = "objective" if name == analysis.objective_metric else "slo" if name in slo else "metric"
            limit = slo.get(name)
            bound = "" if limit is None else f"{'≥' if higher_is_better(name) else '≤'} {num(limit)}"
            rows.append(MetricRow(scenario, name, kind, be, we, w.effects.get(name) if w else None, limit, bound))
    return rows


def _level(analysis: StudyAnalysis) -> str:
    return f"{100 * analysis.confidence:g}"


def _headline(analysis: StudyAnalysis) -> str:
    if not analysis.baseline_measured:
        return f"No verdict: {analysis.winner_reason}."
    tried = [c for c in analysis.configs if not c.is_baseline]
    # A duplicate or skipped config was never booted on purpose: it did not fail.
    not_run = [c for c in tried if c.outcome in (Outcome.duplicate, Outcome.skipped)]
    # Neither is a config whose every trial was stopped mid-way (outcome running).
    failed = [c for c in tried
              if c.outcome not in (Outcome.ok, Outcome.duplicate, Outcome.skipped, TrialState.running)]
    unfinished = ", ".join(f"#{t}" for t in analysis.unfinished_trial_ids)
    stopped = f"trial(s) {unfinished} unfinished (the study was stopped; run it again to resume)"
    if analysis.winner is not None and analysis.baseline is not None:
        eff = analysis.winner.objective_effect
        label = analysis.winner.config.label(analysis.baseline.config)
        so_far = f" So far: {stopped}." if unfinished else ""
        if eff is not None:
            p = eff.p_adjusted if eff.p_adjusted is not None else eff.p_value
            interval = (f"{_level(analysis)} % lower bound {eff.ci_low_pct:+.1f} %: a censored capacity"
                        if eff.censored == "right" else
                        f"{_level(analysis)} % CI {eff.ci_low_pct:+.1f} % to {eff.ci_high_pct:+.1f} %")
            return (f"Winner: {label} improves {analysis.objective_name} by "
                    f"{'at least ' if eff.censored == 'right' else ''}{eff.effect_pct:+.1f} % "
                    f"({interval}, selection-calibrated p = {p:.3g}) over the baseline.{so_far}")
        return f"Winner: {label}.{so_far}"
    known = f", {len(not_run)} not booted (already known)" if not_run else ""
    raced = [c for c in tried if c.stopped_early]
    known += f", {len(raced)} stopped early: clearly worse" if raced else ""
    tally = (f"{len(tried) - len(not_run)} candidate config(s) tried, {len(failed)} failed to run{known}")
    if analysis.winner_reason.startswith("finalists: 0"):
        return f"No winner named: {analysis.winner_reason}."
    if unfinished:
        return (f"No verdict yet: {stopped}. So far {tally}, none improved {analysis.objective_name} "
                "significantly while meeting every SLO.")
    return (f"No config beat the baseline: {tally}, none improved {analysis.objective_name} significantly "
            "while meeting every SLO.")


def _winner_reason(analysis: StudyAnalysis, store: StudyStore) -> str:
    """The analysis' reason, marked as provisional while a trial is unfinished, with where
    re-validation stands (what the next boot pair would buy) once the finalists are re-validated."""
    reason = analysis.winner_reason
    if reason and analysis.unfinished_trial_ids:
        reason = f"so far: {reason}"
    line = _revalidation_line(analysis, store)
    reason = f"{reason}. {line[:1].upper()}{line[1:]}." if reason and line else reason or line
    stop = store.search_stop()
    if stop is None:
        return reason
    ended = f"The search was ended by its stopping rule after {stop.after_trials} trials: {stop.reason}."
    return f"{reason} {ended}" if reason else ended


def _revalidation_line(analysis: StudyAnalysis, store: StudyStore) -> str:
    stored = store.spec_doc()
    if store.final_plan() is None or stored is None:
        return ""
    try:
        spec = StudySpec.from_store(stored)
    except (ValueError, ServetuneError):   # a spec this version cannot read: the report goes on without it
        return ""
    look = next_look(analysis, spec, revalidation_cap(store))
    return look.line() if look.leader is not None else ""


def _speculative_notes(store: StudyStore) -> list[str]:
    """What `plan` warned of, kept in the report: speculative decoding swept on random-token prompts."""
    stored = store.spec_doc()
    if stored is None:
        return []
    try:
        spec = StudySpec.from_store(stored)
    except (ValueError, ServetuneError):
        return []
    return [f"{why.split(': its acceptance')[0]}: the acceptance and the speed-ups of speculative decoding "
            "below say nothing about your own traffic" for _, why in speculative_warnings(spec)]


def _config_heading(analysis: StudyAnalysis, emitted_for: str) -> str:
    if emitted_for == "winner":
        return "Winning config"
    if not emitted_for:
        return "No recommended config: the baseline produced no measurement"
    if analysis.unfinished_trial_ids:
        return "Recommended config so far (the baseline: nothing beat it yet, the study is unfinished)"
    return "Recommended config (the baseline: nothing beat it)"


def _config_label(c: ConfigResult, analysis: StudyAnalysis) -> str:
    base_cfg = analysis.baseline.config if analysis.baseline else None
    return c.config.label(base_cfg) if base_cfg and not c.is_baseline else c.label


def _config_lines(analysis: StudyAnalysis, unapplied: dict[str, list[str]]) -> list[ConfigLine]:
    win_key = analysis.winner.key if analysis.winner else None
    return [ConfigLine(label=_config_label(c, analysis),
                       outcome=c.outcome, trials=len(c.trial_ids), objective=c.objective, effect=c.objective_effect,
                       feasible=c.feasible,
                       slo_violations=sorted({v for s in c.scenarios.values() for v in s.slo_violations}),
                       is_baseline=c.is_baseline, is_winner=c.key == win_key,
                       not_applied=f"not applied: {', '.join(unapplied[c.key])}" if unapplied.get(c.key) else "",
                       slo_state=str(c.slo_state) if c.slo_checks else "",
                       slo_open=[f"{k.scenario} {k.metric}" for k in c.slo_checks if k.state is not SloState.met])
            for c in analysis.configs]


def _unapplied_knobs(analysis: StudyAnalysis, store: StudyStore) -> dict[str, list[str]]:
    """Config key -> its knobs (`env.X`) that a boot of the study showed not applied at its value
    (or unknown to the engine at any value): such a config is reported as not applied."""
    base_cfg = analysis.baseline.config if analysis.baseline else Config()
    return {c.key: [f"env.{var}" for var in gone] for c in analysis.configs
            if (gone := known.did_not_apply(store, c.config, base_cfg))}


def _slo_rows(analysis: StudyAnalysis) -> list[SloRow]:
    """Every measured config's SLOs, scenario by scenario: the baseline and the winner first."""
    win_key = analysis.winner.key if analysis.winner else None
    order = sorted(analysis.configs, key=lambda c: (not c.is_baseline, c.key != win_key))
    return [SloRow(_config_label(c, analysis), check, c.key == win_key)
            for c in order for check in c.slo_checks]


def _redactor(store: StudyStore, spec: dict[str, Any]) -> Callable[[str], str]:
    """Masks what the store's own redactor knows (the tuner's secrets, set while tuning) and the
    values, in this environment, of the secrets the study names: a store written by an older
    servetune may hold them in log tails."""
    engine = spec.get("engine")
    if not isinstance(engine, dict):
        engine = {}
    from_env = Redactor.for_environment(os.environ, [str(n) for n in engine.get("secret_env") or []])
    return lambda text: from_env(store.redact(text))


def _trial_view(t: Trial, base: Config | None, redact: Callable[[str], str], *, name_engine: bool) -> TrialView:
    """`name_engine`: the study ran several engines, so the version cell names the boot's engine."""
    facts = t.boot_facts or BootFacts()
    version = facts.engine_version
    if version and name_engine:
        version = f"{_engine_label(facts.engine)} {version}"
    startup = facts.startup_seconds if facts.startup_seconds is not None else t.boot_s
    mism = [describe_mismatch(m) for m in t.mismatches]
    knob_notes = [redact(k.describe() + (f": {k.evidence_line}" if k.evidence_line else ""))
                  for k in t.knobs if k.status is not KnobStatus.applied]
    return TrialView(
        seq=t.seq, role=t.role, label=t.config.label(base) if base is not None else t.config.label(),
        outcome=t.outcome or t.status, detail=redact(t.detail) if t.detail else t.detail,
        log_lines=explaining_lines(redact(t.log_tail or "")) if t.outcome not in (None, Outcome.ok) else [],
        kv_cache_tokens=facts.kv_cache_tokens, max_concurrency=facts.max_concurrency,
        startup_s=startup, engine_version=version, mismatches=mism,
        knobs=[f"{k.knob}={k.requested} {k.status.value}" for k in t.knobs], knob_notes=knob_notes,
        runs_ok=len(t.ok_runs()), runs_total=len(t.runs), slot=_slot_label(t), cache=cache_label(t.cache),
        excluded=t.exclusion.why if t.exclusion is not None else "")


def cache_label(cache: CacheRecord | None) -> str:
    """`cold, compile 0.2 s, wiped for #7` and the like; "–" for a boot without a record."""
    if cache is None or cache.state is None:
        return "–"
    parts: list[str] = [cache.state]
    if cache.compile_seconds is not None:
        parts.append(f"compile {cache.compile_seconds:.1f} s")
    if cache.wipe_before_boot:
        parts.append(f"wiped for #{cache.replaces_trial}" if cache.replaces_trial is not None else "wiped")
    return ", ".join(parts)


def _exclusions(trials: list[Trial], base: Config | None) -> list[ExclusionView]:
    out = []
    for t in trials:
        if t.exclusion is None:
            continue
        reboot = next((r for r in trials if r.replaces == t.seq), None)
        out.append(ExclusionView(
            seq=t.seq, role=t.role, label=t.config.label(base) if base is not None else t.config.label(),
            why=t.exclusion.why, reboot_seq=reboot.seq if reboot else None,
            reboot_outcome=str(reboot.outcome or reboot.state) if reboot else "",
            reboot_cache=cache_label(reboot.cache) if reboot else ""))
    return out


def _engine_label(kind: str) -> str:
    """How reports name engine `kind` (its profile's label; the kind itself for one not registered)."""
    return PROFILES[kind].label if kind in PROFILES else kind


def _study_engine_kinds(spec: dict[str, Any]) -> list[str]:
    """The engines a stored study spec ran: its engine section's, then the others'."""
    return list(dict.fromkeys([str((spec.get("engine") or {}).get("kind") or "vllm"), *(spec.get("engines") or {})]))


def _provenance(trials: list[Trial], store: StudyStore) -> ProvenanceView:
    """Each distinct engine version the boots logged, named by the engine whose log it is."""
    versions = dict.fromkeys((t.boot_facts.engine, t.boot_facts.engine_version) for t in trials
                             if t.boot_facts is not None and t.boot_facts.engine_version)
    roots = dict.fromkeys(t.cache.root for t in trials if t.cache is not None and t.cache.root)
    return ProvenanceView(engines=[f"{_engine_label(k)} {parse_build(v).describe()}" for k, v in versions if v],
                          images=store.engine_images(),
                          cache_roots=[r for r in roots if r])


def _slot_label(t: Trial) -> str:
    return replace(t.placement, slot=t.slot).label() if t.placement else Placement(t.slot).label()


def _param_effects(analysis: StudyAnalysis, unapplied: dict[str, list[str]]) -> list[ParamEffectRow]:
    """Configs that differ from the baseline in one flag/env entry: that entry's effect (OFAT), or
    "not applied" for a knob that did not take effect (its measurement is the baseline's again)."""
    base = analysis.baseline
    if base is None:
        return []
    rows = []
    for c in analysis.configs:
        if c.is_baseline:
            continue
        diff = c.config.diff(base.config)
        if len(diff) == 1:
            (name, (_, value)), = diff.items()
            rows.append(ParamEffectRow(name, fmt_value(value), c.objective_effect if c.ok else None,
                                       c.objective, not_applied=name in unapplied.get(c.key, [])))
    return sorted(rows, key=lambda r: (r.parameter, r.value))


def _importances(analysis: StudyAnalysis) -> dict[str, float]:
    """PED-ANOVA importance (Optuna) of each varied parameter for the objective, over feasible
    configs; PED-ANOVA needs no scikit-learn, unlike Optuna's fANOVA."""
    scored = [(c, c.objective.estimate) for c in analysis.configs if c.feasible and c.objective is not None and c.ok
              and math.isfinite(c.objective.estimate)]
    pts = [c for c, _ in scored]
    if len(pts) < MIN_CONFIGS_FOR_IMPORTANCE or analysis.baseline is None:
        return {}
    import optuna  # heavy import, only when there is enough data
    from optuna.distributions import BaseDistribution, CategoricalDistribution

    base = analysis.baseline.config
    names = sorted({n for c in pts for n in c.config.diff(base)})

    def value(c: ConfigResult, name: str) -> str:
        if name.startswith("env."):
            return fmt_value(c.config.env.get(name[4:]))
        return fmt_value(c.config.flags.get(name))

    choices = {n: sorted({value(c, n) for c in pts}) for n in names}
    varied = [n for n in names if len(choices[n]) > 1]
    if not varied:
        return {}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dists: dict[str, BaseDistribution] = {n: CategoricalDistribution(choices[n]) for n in varied}
    for c, estimate in scored:
        study.add_trial(optuna.trial.create_trial(params={n: value(c, n) for n in varied}, distributions=dists,
                                                  value=estimate))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))


def _distribution_configs(analysis: StudyAnalysis) -> list[ConfigResult]:
    chosen = [c for c in (analysis.baseline, analysis.winner) if c is not None]
    rest = sorted((c for c in analysis.configs if c.ok and c not in chosen and c.objective),
                  key=lambda c: (not c.is_finalist, -(c.objective.estimate if c.objective else 0.0)))
    out: list[ConfigResult] = []
    for c in chosen + rest:
        if c.key not in {o.key for o in out}:
            out.append(c)
    return out[:MAX_DISTRIBUTION_CONFIGS]


def _plots(analysis: StudyAnalysis, store: StudyStore, trial_by_id: dict[int, Trial]) -> list[plots.Plot]:
    out: list[plots.Plot] = []
    base_cfg = analysis.baseline.config if analysis.baseline else None
    study_dir = store.path.parent

    dist: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for c in _distribution_configs(analysis):
        label = c.label if c.is_baseline or base_cfg is None else c.config.label(base_cfg)
        by_scenario: dict[str, list[Path]] = {}
        for tid in c.trial_ids:
            for r in trial_by_id[tid].runs if tid in trial_by_id else ():
                path = resolve(r.records_path, study_dir)
                if r.ok and path is not None:
                    by_scenario.setdefault(r.scenario, []).append(path)
        for scenario, paths in by_scenario.items():
            per_run = runs_series_ms(paths)
            dist.setdefault(scenario, {})[label] = {
                k: np.concatenate([s[k] for s in per_run]) for k in ("ttft", "tpot", "itl")}
    png = plots.latency_distributions(dist)
    if png:
        out.append(plots.Plot("latency_distributions", "Per-request latency distributions (ECDF)", png))

    seq_of = {t.id: t.seq for t in trial_by_id.values()}
    obj_points = [plots.ObjectivePoint(
        seq=min((seq_of[t] for t in c.trial_ids if t in seq_of), default=0), label=c.label,
        estimate=c.objective.estimate if c.objective and c.feasible and c.ok else None,
        low=c.objective.low if c.objective else math.nan, high=c.objective.high if c.objective else math.nan)
        for c in analysis.configs]
    png = plots.objective_over_trials(sorted(obj_points, key=lambda p: p.seq), analysis.objective_metric,
                                      maximize=analysis.objective_direction != "minimize")
    if png:
        out.append(plots.Plot("objective_over_trials", "Objective over trials", png))

    png = plots.drift(analysis.drift)
    if png:
        out.append(plots.Plot("baseline_drift", "Baseline re-measurements over time (drift)", png))
    return out


def _cost(analysis: StudyAnalysis, store: StudyStore, trials: list[Trial], runs: list[Run]) -> CostView:
    boot = sum(t.total_boot_s for t in trials)
    measure = sum(r.wall_s for r in runs)
    wall = store.elapsed_wall_s()
    if wall <= 0 and trials:
        wall = max((t.ended_at or t.started_at) for t in trials) - min(t.started_at for t in trials)
    c = analysis.cost
    wall, boot, measure = c.get("wall_s", wall), c.get("boot_s", boot), c.get("measure_s", measure)
    wall = max(wall, boot + measure)  # sessions missing or cut short: the parts bound the whole
    other = c.get("other_s", max(wall - boot - measure, 0.0))
    eta_err, note = c.get("eta_error_pct"), ""
    if eta_err is None:
        eta_err, note = _eta_accuracy(store)
    return CostView(wall, boot, measure, other, sum(t.boots for t in trials), len(runs), eta_err, note)


_UNFINISHED = ("interrupted", "paused")   # a session's end reasons that leave the study to resume


def _eta_accuracy(store: StudyStore) -> tuple[float | None, str]:
    """Error of the first ETA, in % of the time that really remained then (positive: too late)."""
    try:
        eta_log: list[EtaEntry] | None = store.eta_log()
    except ValueError:
        eta_log = None  # said once the study is known to be finished
    if eta_log == []:
        return None, "no ETA log stored"
    sessions = store.sessions()
    if not sessions or sessions[-1].ended_at is None:
        return None, "study not finished"
    if sessions[-1].end_reason in _UNFINISHED:
        # its first ETA was for the whole study; the time so far is not what it predicted
        return None, f"study not finished (its last session was {sessions[-1].end_reason})"
    if eta_log is None:
        return None, "ETA log unreadable"
    preds = sorted((e.at, e.predicted_end) for e in eta_log)
    # An ETA predicts the tuner's remaining running time; a study resumed days later did not
    # take those days, so only the time inside sessions after the estimate counts as actual.
    judged = [(pred - at, actual) for at, pred in preds
              if (actual := sum(s.ran_after(at) for s in sessions)) > 0]
    if not judged:
        return None, "ETA log after study end"
    errors = [100.0 * (predicted - actual) / actual for predicted, actual in judged]
    predicted, actual = judged[0]
    note = (f"first ETA {predicted / 60:.1f} min, actual {actual / 60:.1f} min of running time; median error over "
            f"{len(errors)} estimates {float(np.median(np.abs(errors))):.0f} %")
    return errors[0], note


def _recommendation(analysis: StudyAnalysis, spec: dict[str, Any], trial_by_id: dict[int, Trial],
                    images: list[ImageRef]) -> tuple[str, ConfigResult | None, list[tuple[str, str, str]],
                                                      Deployment | None]:
    """What an analysis recommends: the winner, else the baseline, else nothing (a config that
    never produced a measurement is not recommended, not even the baseline); its changes from the
    baseline and its deployment."""
    base = analysis.baseline
    subject = analysis.winner or (base if analysis.baseline_measured else None)
    emitted_for = "winner" if analysis.winner else "baseline" if subject else ""
    if subject is None:
        return emitted_for, None, [], None
    diff = ([(k, fmt_value(a), fmt_value(b)) for k, (a, b) in subject.config.diff(base.config).items()]
            if base is not None else [])
    facts = next((trial_by_id[t].boot_facts for t in reversed(subject.trial_ids)
                  if t in trial_by_id and trial_by_id[t].boot_facts), None) or BootFacts()
    section = (spec.get("engines") or {}).get(subject.config.engine) or spec.get("engine")  # the one it ran on
    dep = Deployment.of(subject.config, section, facts.engine_version, images[-1] if images else None)
    return emitted_for, subject, diff, dep


def _profile_views(profiles: dict[str, StudyAnalysis], spec: dict[str, Any], trial_by_id: dict[int, Trial],
                   images: list[ImageRef]) -> list[ProfileView]:
    out = []
    for name, analysis in profiles.items():
        emitted_for, subject, diff, dep = _recommendation(analysis, spec, trial_by_id, images)
        out.append(ProfileView(
            name=name, objective=f"{analysis.objective_direction} {analysis.objective_name}",
            headline=_headline(analysis), reason=analysis.winner_reason, emitted_for=emitted_for,
            slo_checks=subject.slo_checks if subject is not None else [], diff=diff, deployment=dep,
            snippets=snippets(dep) if dep is not None else None))
    return out


def _pareto(analysis: StudyAnalysis, profiles: dict[str, StudyAnalysis], trials: list[Trial],
            slo_metrics: list[str]) -> tuple[ParetoView | None, plots.Plot | None]:
    x, y = pareto.default_axes(analysis.objective_metric, slo_metrics,
                               [p.objective_metric for p in profiles.values()])
    panels = pareto.panels(analysis, trials, x, y, pareto.picks(analysis, profiles))
    if not panels:
        return None, None
    png = plots.pareto_front(panels)
    figure = plots.Plot(PARETO_PLOT, f"Pareto front: {y} against {x}", png) if png else None
    return ParetoView(x, y, panels, PARETO_PLOT if figure else ""), figure


def build(analysis: StudyAnalysis, store: StudyStore,
          profiles: dict[str, StudyAnalysis] | None = None) -> ReportData:
    """`profiles`: each profile's analysis of the same store (analysis/profiles.py), in the study's order."""
    profiles = profiles or {}
    spec = _spec(store)
    redact = _redactor(store, spec)
    engine_kinds = _study_engine_kinds(spec)
    engine_labels = [_engine_label(k) for k in engine_kinds]
    objective = _objective(spec)
    slo_metrics = list(dict.fromkeys(m for s in (analysis.baseline.scenarios if analysis.baseline else {})
                                     for m in objective.slo_for(s)))
    trials = store.trials()
    runs = [r for t in trials for r in t.runs]
    unapplied = _unapplied_knobs(analysis, store)
    trial_by_id = {t.id: t for t in trials}
    base = analysis.baseline
    base_cfg = base.config if base else None

    images = store.engine_images()
    emitted_for, _, diff, dep = _recommendation(analysis, spec, trial_by_id, images)

    evidence: list[EvidenceRow] = []
    advice: list[Advice] = []
    for c in analysis.configs:
        label = c.label if c.is_baseline or base_cfg is None else c.config.label(base_cfg)
        ev = {s: Evidence.of(r.server) for s, r in c.scenarios.items()}
        evidence += [EvidenceRow(label, s, e) for s, e in ev.items() if not e.empty]
        last = next((trial_by_id[t] for t in reversed(c.trial_ids) if t in trial_by_id), None)
        advice += advise_config(label, c.config, None if c.is_baseline else base_cfg, ev,
                                last.boot_facts if last else None, last.mismatches if last else (),
                                PROFILES.get(c.config.engine or engine_kinds[0]))

    notes = _speculative_notes(store)
    try:
        importances = _importances(analysis)
    except (ValueError, RuntimeError) as exc:  # fANOVA needs enough distinct points
        importances = {}
        notes.append(f"parameter importance not computed: {exc}")

    capacity = build_capacity(analysis, trials, objective, spec.get("price_per_gpu_hour"), store.path.parent,
                              _capacity_spec(spec))
    figures = _plots(analysis, store, trial_by_id)
    front, front_plot = _pareto(analysis, profiles, trials, slo_metrics)
    if front_plot is not None:
        figures.insert(0, front_plot)
    if capacity is not None and capacity.plot is not None:
        figures.insert(0, capacity.plot)
    return ReportData(
        study_name=analysis.study_name, objective_metric=analysis.objective_metric,
        objective_per_gpu=analysis.objective_per_gpu,
        objective_direction=analysis.objective_direction, generated_at=time.time(),
        has_winner=analysis.winner is not None, headline=_headline(analysis),
        winner_reason=_winner_reason(analysis, store),
        emitted_for=emitted_for, config_heading=_config_heading(analysis, emitted_for),
        metric_rows=_metric_rows(analysis, analysis.winner, objective),
        configs=_config_lines(analysis, unapplied), diff=diff, deployment=dep,
        snippets=snippets(dep) if dep is not None else None,
        trials=[_trial_view(t, base_cfg, redact, name_engine=len(engine_labels) > 1) for t in trials],
        slotted=len({t.slot for t in trials}) > 1 or any(t.placement is not None and t.placement.node for t in trials),
        param_effects=_param_effects(analysis, unapplied), importances=importances,
        plots=figures, evidence=evidence, advice=advice,
        cost=_cost(analysis, store, trials, runs), notes=notes, confidence_pct=_level(analysis),
        acceptance=acceptance_rows(analysis, base_cfg), sweep_peaks=sweep_peaks(analysis), capacity=capacity,
        roofline=build_roofline(analysis, trial_by_id, spec, store.bandwidth()),
        fidelity=fidelity_rows(trials, base_cfg), prefill_sweep=sweep_rows(trials, base_cfg),
        slo_rows=_slo_rows(analysis), class_rows=class_rows(analysis, base_cfg),
        exclusions=_exclusions(trials, base_cfg),
        machine=build_machine(analysis, trials, base_cfg),
        profiles=_profile_views(profiles, spec, trial_by_id, images), pareto=front,
        engine_column=engine_labels[0] if len(engine_labels) == 1 else "engine",
        provenance=_provenance(trials, store))
