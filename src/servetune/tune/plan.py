"""What a study will do, before anything boots (`servetune plan`, `servetune tune --dry-run`).

The checks a study can fail in seconds: the engine command is there, the model is reachable,
every flag of the baseline and the space is one the installed engine's parser takes. Then the
search replayed on paper: the strategy is asked for its candidates as it will be in the study,
each answered as if it measured like the baseline (no effect), so OFAT walks from the baseline
and a grid lists its cells; a candidate that runs as the baseline or an earlier candidate by the
engine's argument defaults is a duplicate that will not boot (the same decision `tune.known`
takes with the store). From the booting candidates follow the boots, the runs and the ETA, by
the same formulas the running study uses (`analysis.trial_count`, `eta.seed_from`).

A real study's start (tune/runner.py) runs the same checks before the first boot: the engine
command and the model (`check_start`, before the study's spec is stored; a model id found
nowhere here is left to the engine to download, as the start asks no one on the network), then,
once the engine's defaults are read, the flags (`check_flags`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.defaults import EngineDefaults
from ..engine.equivalence import Booted, duplicate_detail
from ..models.source import ModelSource, locate
from ..search import make_strategy
from ..search.base import TrialView
from ..study._hints import did_you_mean
from ..study.space import env_var, json_field
from ..study.spec import Loc, SpecError, StudySpec
from ..vocabulary import Outcome
from . import eta as eta_seed
from . import slo_proof
from .analysis import trial_count

# Optuna without a trial budget: how many of its proposals the plan lists.
UNBOUNDED_LISTED = 20
# The neutral answer each planned trial gets: the baseline's own spread, no effect.
_NEUTRAL = (0.99, 1.0, 1.01)


@dataclass(frozen=True)
class PlannedCandidate:
    params: dict[str, Any]
    label: str
    duplicate: str | None  # why it will not boot; None: it boots


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
    slo_notes: tuple[str, ...] = ()  # SLOs no config of the study can be shown to meet (slo_proof.unprovable)

    @property
    def booting(self) -> list[PlannedCandidate]:
        return [c for c in self.candidates if c.duplicate is None]


def make_plan(spec: StudySpec, read_defaults: Callable[[], EngineDefaults], *,
              ask_hub: bool = True) -> StudyPlan:
    """Every check, then the plan: reads the engine's defaults (a subprocess) and locates the model."""
    engine, found = find_engine(spec.engine.command)
    defaults = read_defaults() if found else EngineDefaults(source=f"unknown: {engine}")
    return assemble(spec, defaults, locate(spec.engine.model, ask_hub=ask_hub), engine, found)


def assemble(spec: StudySpec, defaults: EngineDefaults, model: ModelSource, engine: str = "not checked",
             found: bool = True) -> StudyPlan:
    """The plan from what is known already (`servetune init` has the model and no defaults yet)."""
    problems = engine_problems(engine, found)
    if found and not defaults.known and defaults.source and _must_read(spec):
        problems.append((("engine", "command"), f"the engine is not usable here: {defaults.source}"))
    problems += flag_problems(spec, defaults)
    problems += model_problems(spec, model)
    candidates = planned_candidates(spec, defaults)
    booting = len([c for c in candidates if c.duplicate is None])
    boots = trial_count(spec, booting)
    seed, basis = eta_seed.seed_from(model.weights_gib, model.weights_source, model.config, list(spec.scenarios))
    per_scenario = eta_seed.runs_per_scenario(spec)
    return StudyPlan(spec=spec, engine=engine, engine_found=found, defaults=defaults, model=model,
                     candidates=candidates, open_ended=spec.strategy in ("ofat", "optuna") and booting > 0,
                     boots=boots, runs=boots * per_scenario * len(spec.scenarios),
                     eta_s=boots * eta_seed.next_trial_s(spec, seed) / spec.parallel.slots,
                     eta_basis=basis, problems=problems, slo_notes=tuple(slo_proof.unprovable(spec)))


def _must_read(spec: StudySpec) -> bool:
    """vLLM's own entry point should answer for its defaults; a container or another engine may not."""
    from ..engine.defaults import runs_vllm

    return spec.engine.kind == "vllm" and runs_vllm(list(spec.engine.command))


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
        if env_var(name) is None:
            field = json_field(name)
            named.append((("space", name), field[0] if field else name))
    return [(loc, f"the installed engine has no flag --{flag}{did_you_mean(flag, sorted(known))} "
                  f"({defaults.source})") for loc, flag in named if flag not in known]


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
        out.append(PlannedCandidate(dict(proposal.params), config.label(baseline), twin))
        if twin is None:
            booted.append(Booted(f"candidate {config.label(baseline)}", config, None))
            history.append(TrialView(params=proposal.params, samples=_NEUTRAL))
        else:
            history.append(TrialView(params=proposal.params, outcome=Outcome.duplicate))
    return out

