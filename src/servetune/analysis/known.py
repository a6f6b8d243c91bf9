"""What the store already knows about a config, so that no boot is spent learning it again.

Before a candidate boots: does it run as a measured config (`duplicate`), must it fail as
one already did, or would it only grow a KV pool that the runs never filled (`skipped`)? After
it booted: does its boot log show it runs as a measured config (`duplicate`, not measured)? The
engine's defaults are read once per study and kept in the store's meta, so a resumed study
decides the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine.bootfacts import BootFacts
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..engine.equivalence import Booted, duplicate_detail, fitting_length, known_to_fail
from ..engine.knobs import ENV_KNOB, unapplied, unknown_variables
from ..engine.registry import PROFILES
from ..store import StudyStore, Trial
from ..vocabulary import Outcome
from . import pool_evidence

DEFAULTS_META = "engine_defaults"
NOT_BOOTED = (Outcome.duplicate, Outcome.skipped)


def engine_defaults(store: StudyStore, command: list[str],
                    read: Callable[[list[str]], EngineDefaults], *,
                    check: Callable[[EngineDefaults], None] = lambda defaults: None) -> EngineDefaults:
    """The engine's argument defaults (`read`: its engine's `read_defaults`), read on the study's
    first start and kept in its meta once
    `check` (the study's flags against them) passed: a start that `check` stopped keeps nothing,
    as the corrected study file may name another engine command."""
    cached = store.get_meta_json(DEFAULTS_META)
    defaults = EngineDefaults.model_validate(cached) if cached is not None else read(command)
    check(defaults)
    if cached is None:
        store.set_meta_json(DEFAULTS_META, defaults.model_dump(mode="json"))
    return defaults


def was_booted(trial: Trial) -> bool:
    """False for a trial decided without a boot (a launch token is written before every spawn)."""
    return not (trial.outcome in NOT_BOOTED and trial.launch_token is None)


def _engine_label(facts: BootFacts | None) -> str:
    """How messages name the engine whose boot log `facts` are."""
    kind = facts.engine if facts is not None else ""
    return PROFILES[kind].label if kind in PROFILES else "engine"


def _name(trial: Trial, baseline: Config) -> str:
    label = trial.config.label(baseline)
    return f"the baseline (#{trial.seq})" if label == "baseline" else f"#{trial.seq} ({label})"


def measured(store: StudyStore, baseline: Config, *, excluding: int | None = None) -> list[Booted]:
    """One measured trial per config (its first), the baseline first."""
    seen: dict[str, Booted] = {}
    for trial in store.trials():
        key = trial.config.key()
        if trial.id == excluding or not trial.ok or key in seen:
            continue
        seen[key] = Booted(_name(trial, baseline), trial.config, trial.boot_facts)
    return sorted(seen.values(), key=lambda b: not b.name.startswith("the baseline"))


def before_boot(store: StudyStore, config: Config, baseline: Config, defaults: EngineDefaults,
                *, excluding: int | None = None) -> tuple[Outcome, str] | None:
    """(duplicate | skipped, why) when booting `config` would teach nothing new, else None:
    it runs as a measured config, it must fail as one did, or it only grows a KV pool that a
    measured config's runs never filled (`pool_evidence`).
    `excluding`: the trial that is `config`, when it is in the store already."""
    booted = measured(store, baseline, excluding=excluding)
    twin = duplicate_detail(config, None, booted, defaults)
    if twin is not None:
        return Outcome.duplicate, twin
    gone = did_not_apply(store, config, baseline, excluding=excluding)
    if gone:
        # The knob would not apply again: the config runs as it does without it.
        without = Config(flags=config.flags, env={k: v for k, v in config.env.items() if k not in gone},
                         engine=config.engine)
        twin = duplicate_detail(without, None, measured(store, baseline, excluding=excluding), defaults)
        why = "; ".join(gone.values())
        if twin is not None:
            return Outcome.duplicate, f"{why}; without it, {twin}"
        return Outcome.skipped, f"{why}: the study boots no value of a knob that did not apply"
    too_long = [Booted(_name(t, baseline), t.config, t.boot_facts) for t in store.trials()
                if t.outcome is Outcome.context_too_long]
    doomed = known_to_fail(config, too_long) or pool_evidence.unneeded_pool(
        store, config, {b.config.key(): b.name for b in booted}, defaults)
    return (Outcome.skipped, doomed) if doomed else None


def did_not_apply(store: StudyStore, config: Config, baseline: Config, *,
                  excluding: int | None = None) -> dict[str, str]:
    """Variable -> why, for each of `config`'s variables a booted trial showed not applied: at this
    value, or at any value when the engine did not know the variable."""
    out: dict[str, str] = {}
    for trial in store.trials():
        if trial.id == excluding:
            continue
        for var in unknown_variables(trial.config, trial.boot_facts):
            if var in config.env and var not in out:
                out[var] = (f"env.{var} is unknown to this {_engine_label(trial.boot_facts)} "
                            f"({_name(trial, baseline)}'s boot log)")
        for knob in unapplied(list(trial.knobs)):
            var = knob.knob.removeprefix(ENV_KNOB)
            if config.env.get(var) == knob.requested and var not in out:
                out[var] = f"{knob.knob}={knob.requested} did not apply in {_name(trial, baseline)} ({knob.reason})"
    return out


def after_boot(store: StudyStore, trial: Trial, facts: BootFacts, baseline: Config,
               defaults: EngineDefaults) -> str | None:
    """Why the booted `trial` runs as a measured config (its boot log against theirs, a knob its
    boot showed not applied taken as unset), or None."""
    others = measured(store, baseline, excluding=trial.id)
    detail = duplicate_detail(trial.config, facts, others, defaults)
    gone = {k.knob.removeprefix(ENV_KNOB): k for k in unapplied(list(store.trial(trial.id).knobs))}
    if detail is None and gone:
        without = Config(flags=trial.config.flags, env={k: v for k, v in trial.config.env.items() if k not in gone},
                         engine=trial.config.engine)
        twin = duplicate_detail(without, facts, others, defaults)
        if twin is not None:
            why = "; ".join(f"{k.knob}={k.requested} did not apply ({k.reason})" for k in gone.values())
            detail = f"{why}; without it, {twin}"
    return None if detail is None else f"{detail} (effective engine config from the boot logs; not measured)"


def context_fit(store: StudyStore, trial: Trial, estimate: int | None, baseline: Config) -> str | None:
    """The max-model-len that would fit `trial`'s memory settings (it failed context_too_long)."""
    return fitting_length(trial.config, estimate, measured(store, baseline, excluding=trial.id))
