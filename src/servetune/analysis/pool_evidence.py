"""Evidence before boots: no boot for a larger KV pool that every earlier run says is not needed.

The field reports' rule ("if num_preemptions_total is 0 and kv_cache_usage_perc is low, do not
raise it"; 0.45 -> 0.55 grew one pool from 174k to 467k tokens and changed nothing): a candidate
whose only difference from a measured config is a larger pool (`--gpu-memory-utilization`,
`--kv-cache-memory-bytes` or `--num-gpu-blocks-override` up) is `skipped` when every run of that
config, in every scenario, scraped no preemption and a peak KV usage below `advice.KV_LOW`.
A run whose /metrics said nothing about either leaves the rule silent: no evidence, no skip.
"""

from __future__ import annotations

from ..engine.applied import as_number
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..server_evidence import KV_LOW, Evidence
from ..store import StudyStore, Trial

POOL_FLAGS = ("gpu-memory-utilization", "kv-cache-memory-bytes", "num-gpu-blocks-override")
# vLLM's --gpu-memory-utilization where the installed engine's default is not known (0.32: 0.92).
FALLBACK_SHARE = 0.9


def _value(config: Config, flag: str, defaults: EngineDefaults) -> float | None:
    """A pool flag's number: the config's, else the engine's default (unset bytes / blocks: none)."""
    if flag in config.flags:
        return as_number(config.flags[flag])
    return as_number(defaults.default(flag))


def reserved_memory(config: Config, defaults: EngineDefaults | None = None) -> tuple[float, float]:
    """What a config reserves, to compare two: its --gpu-memory-utilization (unset: the engine's
    default, else FALLBACK_SHARE), then its --kv-cache-memory-bytes (unset: unbounded)."""
    known = defaults or EngineDefaults()
    share = _value(config, "gpu-memory-utilization", known)
    size = _value(config, "kv-cache-memory-bytes", known)
    return (share if share is not None else FALLBACK_SHARE, size if size is not None else float("inf"))


def raised_pool(config: Config, over: Config, defaults: EngineDefaults) -> list[str] | None:
    """The pool flags `config` raises over `over` ("--gpu-memory-utilization 0.92 -> 0.95"), when
    that is all they differ in; None otherwise (another flag, the env, a pool flag lowered, or a
    value not known: an unset flag whose default the engine did not say)."""
    if config.env != over.env:
        return None
    changed = {f for f in set(config.flags) | set(over.flags) if config.flags.get(f) != over.flags.get(f)}
    if not changed or not changed <= set(POOL_FLAGS):
        return None
    raised: list[str] = []
    for flag in sorted(changed):
        mine, theirs = _value(config, flag, defaults), _value(over, flag, defaults)
        if mine is None or theirs is None or mine < theirs:
            return None
        if mine > theirs:
            raised.append(f"--{flag} {_show(theirs)} -> {_show(mine)}")
    return raised or None


def _show(value: float) -> str:
    return f"{value:g}"


def roomy_runs(store: StudyStore, trials: list[Trial]) -> str | None:
    """'chat, contention: no preemption, peak KV usage at most 23 %' when every ok run of `trials`
    scraped both and none came near a tight pool; None otherwise."""
    runs = [r for t in trials for r in store.runs(t.id) if r.ok]
    if not runs:
        return None
    evidence = [Evidence.of(r.server_stats) for r in runs]
    if any(e.preemptions is None or e.kv_usage_peak is None for e in evidence):
        return None
    if any((e.preemptions or 0) > 0 or (e.kv_usage_peak or 0.0) >= KV_LOW for e in evidence):
        return None
    peak = max(e.kv_usage_peak or 0.0 for e in evidence)
    scenarios = ", ".join(sorted({r.scenario for r in runs}))
    return f"{len(runs)} run(s) of {scenarios}: no preemption, peak KV usage at most {peak:.0%}"


def unneeded_pool(store: StudyStore, config: Config, name_of: dict[str, str],
                  defaults: EngineDefaults) -> str | None:
    """Why booting `config` would only grow a pool that the runs of a measured config never filled;
    None when no measured config says so. `name_of`: a measured config's key -> its name in a detail."""
    by_key: dict[str, list[Trial]] = {}
    for trial in store.trials():
        if trial.ok:
            by_key.setdefault(trial.config.key(), []).append(trial)
    for key, trials in by_key.items():
        raised = raised_pool(config, trials[0].config, defaults)
        if raised is None:
            continue
        roomy = roomy_runs(store, trials)
        if roomy is not None:
            return (f"raises only the KV pool ({'; '.join(raised)}) over {name_of.get(key, 'a measured config')}, "
                    f"whose {roomy} (below {KV_LOW:.0%}): a larger pool buys nothing at this load")
    return None


def conditional(config: Config, baseline: Config, defaults: EngineDefaults) -> str | None:
    """The plan's word on a candidate the rule may skip: before any run, only the condition."""
    raised = raised_pool(config, baseline, defaults)
    if raised is None:
        return None
    return (f"only if the baseline's runs show a tight KV pool (a preemption or peak KV usage >= {KV_LOW:.0%}); "
            f"it raises {'; '.join(raised)}")
