"""Is a config the same server as one already measured, or one known to fail?

Two configs are the same server when every flag in which they differ runs at the same value in
both. A flag's value is known from, in this order: the config's boot log (the engine config
line, the resolved-value lines: what really ran), the requested value when the log does not
contradict it, and the installed engine's argument default (`engine.defaults`) for a flag the
config leaves unset. vLLM resolves many defaults at start-up (per platform: the CPU and GPU
builds differ), so an unset flag whose argument default is None is known only from a boot log;
anything unknown makes two configs different, never the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .applied import applied_value, as_number, same_value, took_effect
from .bootfacts import BootFacts
from .config import Config, FlagValue
from .defaults import EngineDefaults
from .knobs import unknown_variables

# Flags that leave the KV cache's size alone: a config that differs from a failed one only in
# these (and a max-model-len at least as large) fails the same way.
_NOT_MEMORY = frozenset({"enable-prefix-caching", "async-scheduling", "scheduling-policy",
                         "disable-log-stats", "served-model-name"})


@dataclass(frozen=True)
class Booted:
    """A config that already ran: `name` says which in a detail ("the baseline (#1)", "#4")."""

    name: str
    config: Config
    facts: BootFacts | None


@dataclass(frozen=True)
class _Known:
    value: Any
    where: str  # how it is known, for the detail


def _known(flag: str, config: Config, facts: BootFacts | None, defaults: EngineDefaults,
           name: str) -> _Known | None:
    requested = config.flags.get(flag)
    if facts is not None:
        shown = applied_value(flag, facts)
        if shown is not None:
            return _Known(shown, f"{name}'s boot log")
        if requested is not None and not took_effect(flag, requested, facts):
            return None  # requested, but the log says it did not run as asked
    if requested is not None:
        return _Known(requested, "requested")
    default = defaults.default(flag)
    return None if default is None else _Known(default, "the installed engine's argument default")


def _show(value: Any) -> str:
    return str(value).strip("'\"")


def same_server(new: Config, new_facts: BootFacts | None, old: Booted, defaults: EngineDefaults,
                new_name: str = "this config") -> list[str] | None:
    """Why `new` runs as `old` does, one reason per flag they differ in; None when it may not."""
    if new.engine != old.config.engine:
        return None  # another engine section (a study comparing engines): never the same server
    # A variable the engine does not know (its boot log says so) runs as unset; of the rest, only
    # equal ones are the same: their values are in no log.
    new_unknown, old_unknown = unknown_variables(new, new_facts), unknown_variables(old.config, old.facts)
    if _known_env(new, new_unknown) != _known_env(old.config, old_unknown):
        return None
    unknown = {**{v: old.name for v in old_unknown}, **{v: new_name for v in new_unknown}}
    reasons = [f"env.{var} is unknown to this {defaults.label} ({who}'s boot log), so it runs as unset"
               for var, who in sorted(unknown.items()) if new.env.get(var) != old.config.env.get(var)]
    for flag in sorted(set(new.flags) | set(old.config.flags)):
        mine, theirs = new.flags.get(flag), old.config.flags.get(flag)
        if mine == theirs:
            continue
        a = _known(flag, new, new_facts, defaults, new_name)
        b = _known(flag, old.config, old.facts, defaults, old.name)
        if a is None or b is None or not same_value(a.value, b.value):
            return None
        reasons.append(_reason(flag, mine, theirs, a, b, old.name, defaults.label))
    return reasons


def _known_env(config: Config, unknown: list[str]) -> dict[str, str]:
    return {k: v for k, v in config.env.items() if k not in unknown}


def _reason(flag: str, mine: FlagValue, theirs: FlagValue, a: _Known, b: _Known, old_name: str, engine: str) -> str:
    if theirs is None and same_value(mine, a.value):
        return f"{flag}={_show(mine)} is {engine}'s default here ({b.where} shows {_show(b.value)})"
    if mine is None and same_value(theirs, b.value):
        return f"{flag}={_show(theirs)} of {old_name} is {engine}'s default here ({a.where} shows {_show(a.value)})"
    return (f"{flag}={_unset(mine)} runs as {_show(a.value)} ({a.where}), as {flag}={_unset(theirs)} "
            f"of {old_name} does ({b.where})")


def _unset(value: FlagValue) -> str:
    return "(unset)" if value is None else _show(value)


def duplicate_detail(new: Config, new_facts: BootFacts | None, measured: list[Booted],
                     defaults: EngineDefaults, new_name: str = "this config") -> str | None:
    """'same as the baseline (#1): ...' for the first measured config `new` runs as, else None."""
    for old in measured:
        reasons = same_server(new, new_facts, old, defaults, new_name)
        if reasons is not None:
            return f"same as {old.name}: " + ("; ".join(reasons) or "the same flags and environment")
    return None


def known_to_fail(new: Config, too_long: list[Booted]) -> str | None:
    """Why `new` must fail `context_too_long`: a max-model-len at least as large as one that
    already failed so, with the same memory settings. None when that is not known."""
    length = as_number(new.flags.get("max-model-len"))
    if length is None:
        return None
    for failed in too_long:
        failed_length = as_number(failed.config.flags.get("max-model-len"))
        if failed_length is None or length < failed_length or not same_memory(new, failed.config):
            continue
        return (f"max-model-len={_show(new.flags['max-model-len'])} is not below "
                f"max-model-len={_show(failed.config.flags['max-model-len'])}, which failed context_too_long "
                f"in {failed.name} with the same memory settings")
    return None


def same_memory(a: Config, b: Config) -> bool:
    """Do `a` and `b` get the same KV cache (every flag but max-model-len and those that leave
    the cache alone, and the environment, equal)?"""
    if a.env != b.env:
        return False
    flags = (set(a.flags) | set(b.flags)) - _NOT_MEMORY - {"max-model-len"}
    return all(a.flags.get(f) == b.flags.get(f) for f in flags)


def fitting_length(config: Config, estimate: int | None, booted: list[Booted]) -> str | None:
    """For a study's config that failed context_too_long: the --max-model-len that would fit, from
    vLLM's estimate in its own boot, else from the KV cache a booted config with the same memory
    settings logged (about X·Y tokens fit one request). None when neither is known."""
    if estimate is not None:
        return f"fits: --max-model-len {estimate} (vLLM's estimate for these memory settings)"
    for other in booted:
        facts = other.facts
        if facts is None or not same_memory(config, other.config):
            continue
        tokens = facts.kv_cache_tokens
        if facts.max_concurrency is not None and facts.max_concurrency_tokens:
            tokens = math.floor(facts.max_concurrency * facts.max_concurrency_tokens)
        if tokens:
            return (f"fits: about --max-model-len {tokens} (the KV cache of {other.name}, same memory settings, "
                    f"holds {tokens:,} tokens; `servetune probe context` finds the exact length)")
    return None
