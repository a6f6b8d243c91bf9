"""What a study will do, before anything boots (`servetune plan`, `servetune tune --dry-run`).

The checks a study can fail in seconds: the engine command is there, the model is reachable,
every flag of the baseline and the space is one the installed engine's parser takes. Then the
search replayed on paper: the strategy is asked for its candidates as it will be in the study,
each answered as if it measured like the baseline (no effect), so OFAT walks from the baseline
and a grid lists its cells; a candidate that runs as the baseline or an earlier candidate by the
engine's argument defaults is a duplicate that will not boot (the same decision `analysis.known`
takes with the store). From the booting candidates follow the boots, the runs and the ETA, by
the same formulas the running study uses (`analysis.trial_count`, `eta.seed_from`). Values that
need a newer GPU or a kernel package the engine's interpreter lacks (`engine.gates`) are flagged,
not refused: a plan may be made on another machine than the one the study runs on; so is a sweep
of speculative decoding on random-token prompts (`study.representative`), at every start too.

A real study's start (tune/runner.py) runs the same checks before the first boot: the engine
command and the model (`check_start`, before the study's spec is stored; a model id found
nowhere here is left to the engine to download, as the start asks no one on the network), then,
once the engine's defaults are read, the flags (`check_flags`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis import eta as eta_seed
from ..analysis import pool_evidence, slo_proof
from ..analysis.analysis import trial_count
from ..engine.defaults import EngineDefaults, in_container, runs_package
from ..engine.equivalence import Booted, duplicate_detail
from ..engine.gates import why_not_here
from ..engine.hardware import Hardware
from ..engine.knobs import ENV_KNOB, evidence_source
from ..engine.registry import profile_for
from ..models.source import ModelSource, locate
from ..search import make_strategy
from ..search.base import TrialView
from ..study._hints import did_you_mean
from ..study.representative import speculative_warnings
from ..study.space import ENGINE_KIND_PARAM, env_var, json_field
from ..study.spec import Loc, SpecError, StudySpec
from ..vocabulary import Outcome

# Optuna without a trial budget: how many of its proposals the plan lists.
UNBOUNDED_LISTED = 20
# The neutral answer each planned trial gets: the baseline's own spread, no effect.
_NEUTRAL = (0.99, 1.0, 1.01)


@dataclass(frozen=True)
class PlannedCandidate:
    params: dict[str, Any]
    label: str
    duplicate: str | None  # why it will not boot; None: it boots
    only_if: str | None = None  # a condition the runs decide (pool_evidence): it boots only if it holds


@dataclass(frozen=True)
class StudyPlan:
    spec: StudySpec
    engine: str                     # the command's program as found, or why not
    engine_found: bool
    defaults: EngineDefaults
    model: ModelSource
    candidates: list[PlannedCandidate]
    open_ended: bool                # the strategy's later picks depend on what is measured
    boots: int
    runs: float
    eta_s: float
    eta_basis: str
    problems: list[tuple[Loc, str]]  # what stops the study (key path, why): fix before it runs
    # Each env knob (`env.NAME`) -> what can show it applied or not; None: nothing, it reads unproven
    knob_evidence: dict[str, str | None] = field(default_factory=dict)
    warnings: list[tuple[Loc, str]] = field(default_factory=list)  # what will likely fail or run otherwise
    slo_notes: tuple[str, ...] = ()  # SLOs no config of the study can be shown to meet (slo_proof.unprovable)

    @property
    def booting(self) -> list[PlannedCandidate]:
        return [c for c in self.candidates if c.duplicate is None]


def make_plan(spec: StudySpec, read_defaults: Callable[[], EngineDefaults], *,
              ask_hub: bool = True, hardware: Hardware | None = None) -> StudyPlan:
    """Every check, then the plan: reads the engine's defaults (a subprocess) and locates the model."""
    engine, found = find_engine(spec.engine.command)
    unread = EngineDefaults(label=spec.engine.profile.label, source=f"unknown: {engine}")
    defaults = read_defaults() if found else unread
    return assemble(spec, defaults, locate(spec.engine.model, ask_hub=ask_hub), engine, found, hardware)


def assemble(spec: StudySpec, defaults: EngineDefaults, model: ModelSource, engine: str = "not checked",
             found: bool = True, hardware: Hardware | None = None) -> StudyPlan:
    """The plan from what is known already (`servetune init` has the model and no defaults yet)."""
    problems = engine_problems(engine, found)
    if found and not defaults.known and defaults.source and _must_read(spec):
        problems.append((("engine", "command"), f"the engine is not usable here: {defaults.source}"))
    problems += flag_problems(spec, defaults)
    problems += model_problems(spec, model)
    candidates = planned_candidates(spec, defaults)
    booting = len([c for c in candidates if c.duplicate is None])
    boots = trial_count(spec, booting)
    seed, basis = eta_seed.seed_for(model, list(spec.scenarios))
    per_scenario = eta_seed.runs_per_scenario(spec)
    return StudyPlan(spec=spec, engine=engine, engine_found=found, defaults=defaults, model=model,
                     candidates=candidates, open_ended=spec.strategy in ("ofat", "optuna") and booting > 0,
                     boots=boots, runs=boots * per_scenario * len(spec.scenarios),
                     eta_s=eta_seed.trials_s(spec, seed, boots, 2 * spec.finalists, spec.parallel.slots),
                     eta_basis=basis, problems=problems, knob_evidence=knob_evidence(spec),
                     warnings=speculative_warnings(spec) + hardware_warnings(spec, hardware, defaults.modules),
                     slo_notes=tuple(slo_proof.unprovable(spec)))


def knob_evidence(spec: StudySpec) -> dict[str, str | None]:
    """Every env knob of the study (baseline and space) with what can prove it applied (engine/knobs.py)."""
    container = in_container(list(spec.engine.command))
    names = dict.fromkeys([*spec.engine.env, *(var for n in spec.space if (var := env_var(n)) is not None)])
    return {f"{ENV_KNOB}{var}": evidence_source(var, spec.engine.evidence.get(f"{ENV_KNOB}{var}"), container)
            for var in names if var not in spec.engine.secret_env}


def _must_read(spec: StudySpec) -> bool:
    """An engine whose profile requires it answers for its defaults when the study runs its own entry
    point; a container, another program or another engine may not."""
    profile = profile_for(spec.engine.kind)
    return profile.defaults_required and runs_package(list(spec.engine.command), profile.package)


def find_engine(command: list[str]) -> tuple[str, bool]:
    """(the program that will run, True) or (why it cannot, False)."""
    program = command[0]
    if program in ("python", "python3"):
        return "python (servetune's own interpreter)", True
    if "/" in program:
        path = Path(program)
        return (str(path), True) if path.is_file() else (f"{program!r} does not exist", False)
    where = shutil.which(program)
    return (where, True) if where else (f"{program!r} is not on PATH", False)


def engine_problems(engine: str, found: bool) -> list[tuple[Loc, str]]:
    """`find_engine`'s answer as a problem of the study file."""
    return [] if found else [(("engine", "command"), engine)]


def model_problems(spec: StudySpec, model: ModelSource) -> list[tuple[Loc, str]]:
    """`locate`'s answer as a problem of the study file."""
    return [] if model.reachable else [(("engine", "model"), f"{spec.engine.model!r} is not reachable: {model.where}")]


def check_start(spec: StudySpec) -> None:
    """At a study's start, before its spec is stored or anything boots: the engine command and the model,
    as `plan` checks them. The Hub is not asked (no network call at a start, and no study stopped
    by a network hiccup on resume): a model id in neither a directory nor the local cache passes,
    and the engine downloads it at the first boot, as it would for `plan` with the Hub answering."""
    engine, found = find_engine(list(spec.engine.command))
    model = locate(spec.engine.model, ask_hub=False)
    problems = engine_problems(engine, found) + ([] if model.hub_not_asked else model_problems(spec, model))
    if problems:
        raise SpecError(problems)


def flag_problems(spec: StudySpec, defaults: EngineDefaults) -> list[tuple[Loc, str]]:
    """Flags of the baseline and the space that the installed engine's parser does not take."""
    known = set(defaults.flags)
    if not known:
        return []
    named: list[tuple[Loc, str]] = [(("engine", "args", name), name) for name in spec.engine.args]
    for name in spec.space:
        if env_var(name) is None and name != ENGINE_KIND_PARAM:
            field = json_field(name)
            named.append((("space", name), field[0] if field else name))
    return [(loc, f"the installed engine has no flag --{flag}{did_you_mean(flag, sorted(known))} "
                  f"({defaults.source})") for loc, flag in named if flag not in known]


def hardware_warnings(spec: StudySpec, hardware: Hardware | None,
                      modules: list[str] | None) -> list[tuple[Loc, str]]:
    """Baseline and space values that need a newer GPU than `hardware` has, or a kernel package
    missing from the engine's interpreter (`modules`); None for either: not checked."""
    named: list[tuple[Loc, str, Any]] = [(("engine", "args", k), k, v) for k, v in spec.engine.args.items()]
    named += [(("engine", "env", k), f"env.{k}", v) for k, v in spec.engine.env.items()]
    for name, param in spec.space.items():
        named += [(("space", name), name, v) for v in (param.values or [])]
    out = []
    for loc, name, value in named:
        why = why_not_here(name, value, hardware, modules)
        if why is not None:
            out.append((loc, f"{name}: {value}: {why}"))
    return out


def check_flags(spec: StudySpec, defaults: EngineDefaults) -> None:
    """At a study's start: a flag the engine does not take stops it before the first boot."""
    problems = flag_problems(spec, defaults)
    if problems:
        raise SpecError(problems)


def planned_candidates(spec: StudySpec, defaults: EngineDefaults) -> list[PlannedCandidate]:
    """The strategy's proposals, each answered as measuring like the baseline, until it stops or
    the trial budget (counted in booted candidates, as the study counts them) is spent."""
    baseline = spec.baseline_config()
    strategy = make_strategy(spec)
    history: list[TrialView] = [TrialView(params={}, samples=_NEUTRAL)]
    booted = [Booted("the baseline", baseline, None)]
    out: list[PlannedCandidate] = []
    limit = spec.budget.trials or (UNBOUNDED_LISTED if spec.strategy == "optuna" else None)
    while limit is None or len([c for c in out if c.duplicate is None]) < limit:
        proposal = strategy.propose(history)
        if proposal is None:
            break
        config = spec.config_for(proposal.params)
        twin = duplicate_detail(config, None, booted, defaults)
        out.append(PlannedCandidate(dict(proposal.params), config.label(baseline), twin,
                                    None if twin else pool_evidence.conditional(config, baseline, defaults)))
        if twin is None:
            booted.append(Booted(f"candidate {config.label(baseline)}", config, None))
            history.append(TrialView(params=proposal.params, samples=_NEUTRAL))
        else:
            history.append(TrialView(params=proposal.params, outcome=Outcome.duplicate))
    return out

