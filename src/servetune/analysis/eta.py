"""Time estimates: seeded before the first boot from what the study file says, then from what
this study has measured (boot and run durations).

A capacity study's trial is a search of load levels per scenario, not a fixed number of
replicates: once trials have finished, a scenario's cost on one boot is the median of what their
searches took (`trial_run_s`); before that, the seed counts `CAPACITY_RUNS_PER_MAX_LEVEL` runs
per allowed level.

The seed: a boot takes a fixed part plus a part per GiB of weights (the model directory's
weight files, else a parameter count from its config.json, as `servetune model make` writes
it); a run takes its requests in waves of `concurrency`, each a prefill and a decode at a rough
rate that grows with the weights a step reads (for a mixture of experts, those of the experts
its batch routes to: `active_fraction`). Calibrated on two machines: the 2-core CPU box (tiny
model: launch to healthy 33-60 s) and the H200 (Qwen3-8B, 15.3 GiB: 44-73 s; TPOT 5.1-7.0 ms;
run times of its four scenarios within 30 % of this model). The first whole-study estimate is
kept in the store's meta, and the summary says how far off it was.

Short screening (analysis/screening.py) runs the search's boots with a share of each scenario's
prompts and the finalists' in full: a search trial and a validation trial are estimated apart,
each from its own measured runs, a screened run not yet measured as the fixed overhead plus that
share of the rest of a full one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from ..load.scenario import Scenario
from ..models.architecture import active_fraction
from ..models.source import ModelSource, model_config, model_gib
from ..store import Run, StudyStore, Trial
from ..study.objective import Objective
from ..study.spec import StudySpec
from .screening import is_short

# Before anything is measured and without a seed: a guess only.
DEFAULT_BOOT_S = 90.0
DEFAULT_RUN_S = 30.0

BOOT_FIXED_S = 40.0      # importing vLLM, the API server, compile and warmup of a small model
BOOT_S_PER_GIB = 1.0     # loading and profiling the weights
DECODE_FIXED_S = 0.002   # one decode step of a tiny model
DECODE_S_PER_GIB = 0.0002  # reading the weights once per step (~5 TB/s)
PREFILL_TOKENS_PER_S = 40_000.0
RUN_OVERHEAD_S = 1.0     # prefix-cache reset, /metrics scrapes, the client self-check
# Runs a capacity search takes per level it may measure: 16.4 runs at 12 levels at most on the
# simulated server of benchmarks/capacity_search.py (undecided levels are measured again).
CAPACITY_RUNS_PER_MAX_LEVEL = 1.4
FIRST_ETA_META = "first_eta"
SEED_META = "eta_seed"


@dataclass(frozen=True)
class Eta:
    boot_s: float           # median measured boot time (or the seed's)
    run_s: dict[str, float]  # median measured run time per scenario (or the seed's)
    measured: bool          # False while it is still a guess or a seed
    seed_run_s: dict[str, float] = field(default_factory=dict)  # for scenarios not measured yet
    trial_run_s: dict[str, float] = field(default_factory=dict)  # capacity: a scenario's whole search on a boot
    screen_run_s: dict[str, float] = field(default_factory=dict)  # measured runs of the search's shortened trials

    def trial_s(self, scenarios: list[str], runs_per_scenario: float, screen_fraction: float = 1.0) -> float:
        """One trial: a boot and its runs, each scenario's shortened to `screen_fraction` of its
        prompts (a search trial of a study that screens short)."""
        return self.boot_s + sum(
            self.trial_run_s[s] if s in self.trial_run_s else runs_per_scenario * self._run_s(s, screen_fraction)
            for s in scenarios)

    def _run_s(self, scenario: str, screen_fraction: float) -> float:
        if screen_fraction < 1.0 and scenario in self.screen_run_s:
            return self.screen_run_s[scenario]
        full = self.run_s.get(scenario, self.seed_run_s.get(scenario, DEFAULT_RUN_S))
        if screen_fraction >= 1.0:
            return full
        return min(full, RUN_OVERHEAD_S) + screen_fraction * max(full - RUN_OVERHEAD_S, 0.0)


def estimate(trials: list[Trial], runs: list[Run], seed: Eta | None = None,
             whole_trials: bool = False, screened: bool = False) -> Eta:
    """Medians of what was measured; `whole_trials` (capacity studies): also each scenario's
    measuring time per finished trial; `screened`: the search's trials ran shortened, their runs
    are medians of their own."""
    boots = [t.boot_s for t in trials if t.boot_s is not None]
    shortened = {t.id for t in trials if not t.role.is_validation} if screened else set()
    per_scenario: dict[str, list[float]] = {}
    per_screened: dict[str, list[float]] = {}
    for run in runs:
        (per_screened if run.trial_id in shortened else per_scenario).setdefault(run.scenario, []).append(run.wall_s)
    per_trial: dict[str, dict[int, float]] = {}
    if whole_trials:
        done = {t.id for t in trials if t.done}
        for run in runs:
            if run.trial_id in done:
                of_scenario = per_trial.setdefault(run.scenario, {})
                of_scenario[run.trial_id] = of_scenario.get(run.trial_id, 0.0) + run.wall_s
    return Eta(
        boot_s=median(boots) if boots else (seed.boot_s if seed else DEFAULT_BOOT_S),
        run_s={s: median(v) for s, v in per_scenario.items()},
        measured=bool(boots) or bool(runs),
        seed_run_s=dict(seed.run_s) if seed else {},
        trial_run_s={s: median(v.values()) for s, v in per_trial.items()},
        screen_run_s={s: median(v) for s, v in per_screened.items()},
    )


def for_study(spec: StudySpec, trials: list[Trial], runs: list[Run], seed: Eta | None) -> Eta:
    return estimate(trials, runs, seed, whole_trials=Objective(spec).is_capacity, screened=is_short(spec))


def runs_per_scenario(spec: StudySpec) -> float:
    """Runs one trial makes of each scenario, before any trial has shown it: the replicates, or a
    capacity search's expected runs."""
    if Objective(spec).is_capacity:
        return CAPACITY_RUNS_PER_MAX_LEVEL * spec.capacity.max_levels
    return float(spec.replicates.min)


def next_trial_s(spec: StudySpec, eta: Eta, validation: bool = False) -> float:
    """Seconds one more trial of this study should take: one of its search (shortened where the
    study screens short), or with `validation` a finalist's or its fresh baseline's (in full)."""
    fraction = spec.screening.num_prompts_fraction if is_short(spec) and not validation else 1.0
    return eta.trial_s(spec.scenario_names, runs_per_scenario(spec), fraction)


def trials_s(spec: StudySpec, eta: Eta, trials: int, validation: int, slots: int) -> float:
    """Seconds `trials` trials take on `slots` slots, `validation` of them (finalists and their
    fresh baselines) in full."""
    validation = min(validation, trials)
    search = (trials - validation) * next_trial_s(spec, eta)
    return (search + validation * next_trial_s(spec, eta, validation=True)) / max(slots, 1)


# --- the seed ---------------------------------------------------------------------------


def mean_len(length: Any) -> float:
    if isinstance(length, int):
        return float(length)
    kind = getattr(length, "kind", None)
    if kind == "fixed":
        return float(length.value)
    if kind == "uniform":
        middle: float = (length.low + length.high) / 2
        return middle
    if kind == "normal":
        return float(length.mean)
    return 512.0  # lengths from a file: not read for a guess


def seed_run_s(scenario: Scenario, gib: float, config: dict[str, Any] | None = None) -> float:
    """One run of `scenario`: its requests (warmups included) in waves of `concurrency`. A decode
    step reads the weights its batch routes to (`config`: the model's config.json, for a mixture
    of experts; all `gib` of them without it)."""
    if scenario.sweep_input_lens:
        lens = scenario.sweep_input_lens
        requests, input_len = len(lens), sum(lens) / len(lens)
    else:
        requests, input_len = scenario.num_prompts or 0, mean_len(scenario.input_len)
    output_len = mean_len(scenario.output_len)
    total = requests + scenario.effective_warmups
    slots = scenario.concurrency or max(total, 1)
    batch = min(slots, total)
    read_gib = gib * (active_fraction(config, batch) if config else 1.0)
    per_wave = batch * input_len / PREFILL_TOKENS_PER_S + output_len * (DECODE_FIXED_S + DECODE_S_PER_GIB * read_gib)
    arrivals = requests / scenario.rate if scenario.rate and math.isfinite(scenario.rate) else 0.0
    busy = max(math.ceil(total / slots) * per_wave, arrivals + per_wave)
    return RUN_OVERHEAD_S + max(busy, scenario.duration_s or 0.0)


def seed(model_dir: Path, scenarios: list[Scenario]) -> tuple[Eta, str]:
    """An Eta from the model's size and the scenarios' token counts, and what it rests on."""
    gib, source = model_gib(model_dir)
    return seed_from(gib, source, model_config(model_dir), scenarios)


def seed_for(model: ModelSource, scenarios: list[Scenario]) -> tuple[Eta, str]:
    """`seed` for a model wherever it is (`models.source.locate`): a Hub id's config.json from the
    Hugging Face cache counts its active experts, as a local directory's does."""
    return seed_from(model.weights_gib, model.weights_source, model.config, scenarios)


def seed_from(gib: float | None, source: str, config: dict[str, Any] | None,
              scenarios: list[Scenario]) -> tuple[Eta, str]:
    """`seed` from a model's size and config.json however they were found (a Hub id: no directory)."""
    size = gib if gib is not None else 0.0
    # `config`: a boot loads every weight; a decode step reads its batch's experts
    eta = Eta(boot_s=BOOT_FIXED_S + BOOT_S_PER_GIB * size,
              run_s={s.name: seed_run_s(s, size, config) for s in scenarios}, measured=False)
    basis = f"model {size:.2f} GiB ({source})" if gib is not None else f"model size unknown ({source})"
    active = active_fraction(config) if config is not None else 1.0
    if gib is not None and active < 1:
        basis += f", {active:.1%} active per token"
    return eta, basis


def store_seed(store: StudyStore, eta: Eta) -> None:
    store.set_meta_json(SEED_META, {"boot_s": eta.boot_s, "run_s": eta.run_s})


def stored_seed(store: StudyStore) -> Eta | None:
    """The seed the tuner wrote (None for a store from before seeds): the ETA until measurements come."""
    raw = store.get_meta_json(SEED_META)
    if not raw:
        return None
    return Eta(boot_s=float(raw["boot_s"]), run_s={k: float(v) for k, v in raw["run_s"].items()}, measured=False)


# --- the first estimate and its error -----------------------------------------------------

def record_first_estimate(store: StudyStore, predicted_s: float, basis: str, at: float) -> None:
    if store.get_meta_json(FIRST_ETA_META) is None:
        store.set_meta_json(FIRST_ETA_META, {"predicted_s": predicted_s, "basis": basis, "at": at})


def record_took(store: StudyStore) -> None:
    first = store.get_meta_json(FIRST_ETA_META)
    if first is not None:
        store.set_meta_json(FIRST_ETA_META, {**first, "took_s": store.elapsed_wall_s()})


def first_estimate_summary(store: StudyStore) -> str | None:
    """'first estimate 25 min, took 31 min (+24 %)', or '..., 12 min so far' while it runs."""
    first = store.get_meta_json(FIRST_ETA_META)
    if not first or not first.get("predicted_s"):
        return None
    predicted = float(first["predicted_s"])
    head = f"first estimate {_minutes(predicted)} ({first.get('basis', 'seeded')})"
    if first.get("took_s") is None:
        return f"{head}, {_minutes(store.elapsed_wall_s())} so far"
    took = float(first["took_s"])
    return f"{head}, took {_minutes(took)} ({(took - predicted) / predicted * 100:+.0f} %)"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"
