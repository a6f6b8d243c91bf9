"""The body of a trial under `maximize: capacity`: on one boot, a capacity search per scenario
(capacity/), every load level's Run stored as it ends, then the scenario's capacity stored as a
Run of its own (replicate 0) that the analysis reads as the scenario's objective value.

Level runs carry their load level in their summary (`load_level`, `load`, `stopped_early`), so a
killed search resumes where it was: the search is a deterministic function of the samples it is
given, so the stored levels are replayed into it in the order they were measured and only what
is missing is measured, on the new boot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from ..analysis.capacity_runs import (
    CAPACITY_REPLICATE,
    JUDGEMENT,
    LEVEL_KEY,
    current_capacity_runs,
    interval_text,
    is_level_run,
    judged_levels,
    load_kind,
    stored_samples,
)
from ..capacity.estimate import CapacityEstimate, estimate
from ..capacity.http import LoadKind, measure_level
from ..capacity.levels import LevelSample
from ..capacity.replay import Replay
from ..capacity.search import SearchSettings, search, settings_for
from ..capacity.slo import Slo
from ..load.records import RunResult, RunSummary
from ..load.scenario import Scenario
from ..machine import RunMachine, RunSampler
from ..store import Run, StudyStore, Trial
from ..study.metrics import CAPACITY
from ..study.objective import Objective
from ..study.spec import StudySpec
from ..vocabulary import Outcome


@dataclass(frozen=True)
class CapacityPlan:
    slos: dict[str, list[Slo]]             # per scored scenario
    settings: dict[str, SearchSettings]    # per scored scenario (rate or concurrency)
    num_prompts: int


def plan_for(spec: StudySpec) -> CapacityPlan | None:
    """The capacity plan of a study that maximises capacity; None for any other objective."""
    objective = Objective(spec)
    if not objective.is_capacity:
        return None
    c = spec.capacity
    scenarios = {s.name: s for s in spec.scenarios}
    return CapacityPlan(
        slos={n: objective.capacity_slos(n) for n in objective.scored_scenarios},
        settings={n: settings_for(load_kind(scenarios[n]), start=first_level(scenarios[n], c.start),
                                  max_level=c.max_level, alpha=spec.alpha,
                                  rel_tol=c.rel_tol, max_levels=c.max_levels, max_runs_per_level=c.max_runs_per_level,
                                  looks_per_run=c.looks_per_run)
                  for n in objective.scored_scenarios},
        num_prompts=c.num_prompts,
    )


def first_level(scenario: Scenario, start: float | None) -> float:
    """Where a scenario's search starts: `capacity.start` when given, else the scenario's own
    rate or concurrency (the user's guess at the load), which saves the levels of doubling up
    from 1."""
    if start is not None:
        return start
    if scenario.trace is not None:
        return scenario.trace.speedup
    return float(scenario.rate if scenario.rate is not None else scenario.concurrency or 1)


def refresh_estimates(store: StudyStore, spec: StudySpec, study_dir: Path) -> list[str]:
    """Capacities estimated by older judgement rules, estimated again from the trial's stored
    levels and recorded as the capacity Run's next attempt (the old one stays in the store), so
    a resumed study compares every config by the same rules. What was refreshed, one line each."""
    plan = plan_for(spec)
    if plan is None:
        return []
    kinds = {s.name: load_kind(s) for s in spec.scenarios}
    refreshed = []
    for trial in store.trials():
        for name, slos in plan.slos.items():
            for old in current_capacity_runs(trial.runs, name):
                if old.summary.get("judgement", 1) >= JUDGEMENT:
                    continue
                level_runs = [r for r in trial.runs if r.scenario == name and is_level_run(r.summary)]
                levels = judged_levels(level_runs, slos, plan.settings[name].looks, study_dir)
                est = estimate(levels, integer=kinds[name] == "concurrency", alpha=plan.settings[name].alpha)
                summary = capacity_summary(est, kinds[name], slos, len(levels), sum(lv.requests for lv in levels),
                                           level_runs)
                store.record_run(trial.id, CAPACITY_REPLICATE, RunResult(scenario=name, summary=summary),
                                 started_at=old.started_at, ended_at=old.ended_at, attempt=old.attempt + 1)
                refreshed.append(f"trial #{trial.seq} {name}: {interval_text(old.summary)} -> {interval_text(summary)}")
    return refreshed


@dataclass(frozen=True)
class Server:
    """What a capacity search needs of the running server and of the trial around it."""

    url: str
    model: str
    api_key: str | None
    is_alive: Callable[[], bool]
    before_run: Callable[[], object]   # e.g. empty the prefix cache
    kv_cache_tokens: int | None = None   # the KV pool its boot log gave
    sampler: Callable[[], RunSampler] | None = None   # the machine sampled through each level (machine/)


# (scenario, level run number, done requests, total requests)
LevelProgress = Callable[[str, int, int, int], None]
# (replicate, result, started_at, the machine through it): commit one Run of the trial
RecordRun = Callable[[int, RunResult, float, RunMachine | None], None]


def measure_capacity(store: StudyStore, trial: Trial, scenarios: list[Scenario], plan: CapacityPlan,
                     server: Server, *, runs_dir: Path, study_dir: Path, tokenizer_dir: Path | None,
                     record: RecordRun, progress: LevelProgress) -> tuple[str, str | None]:
    """Search every scored scenario's capacity on this boot; (outcome, detail) of the trial."""
    for scenario in scenarios:
        slos = plan.slos.get(scenario.name)
        if not slos:
            continue
        runs = [r for r in store.runs(trial.id) if r.scenario == scenario.name]
        if any(r.replicate == CAPACITY_REPLICATE and r.outcome == Outcome.ok for r in runs):
            continue  # searched on an earlier boot of this trial
        levels = _LevelRuns(trial, scenario, slos, plan, server, runs, runs_dir=runs_dir,
                            tokenizer_dir=tokenizer_dir, record=record, progress=progress)
        searched = search(Replay(stored_samples(runs, study_dir, slos), levels.measure), slos,
                          plan.settings[scenario.name])
        if searched.error is not None or not searched.levels:
            return levels.failure or (str(Outcome.crashed), f"{scenario.name}: {searched.error}")
        est = estimate(searched.levels, integer=levels.kind == "concurrency", alpha=plan.settings[scenario.name].alpha)
        stored = [r for r in store.runs(trial.id) if r.scenario == scenario.name and is_level_run(r.summary)]
        # Derived from the level runs, not measured: no time of its own (the study's cost counts the levels').
        record(CAPACITY_REPLICATE, RunResult(scenario=scenario.name, summary=capacity_summary(
            est, levels.kind, slos, len(searched.levels), searched.requests, stored)), time.time(), None)
    return str(Outcome.ok), None


class _LevelRuns:
    """The `measure(level, prior)` of one scenario's search on one boot (behind a Replay of the
    levels an earlier boot of the trial stored): each level a Run on this server, committed as it
    ends."""

    def __init__(self, trial: Trial, scenario: Scenario, slos: list[Slo], plan: CapacityPlan, server: Server,
                 runs: list[Run], *, runs_dir: Path, tokenizer_dir: Path | None,
                 record: RecordRun, progress: LevelProgress) -> None:
        self.trial, self.scenario, self.slos, self.plan, self.server = trial, scenario, slos, plan, server
        self.runs_dir, self.tokenizer_dir, self.record, self.progress = runs_dir, tokenizer_dir, record, progress
        self.kind = load_kind(scenario)
        self.next_number = max((r.replicate for r in runs), default=0) + 1
        self.failure: tuple[str, str] | None = None   # the outcome that ended the search early

    def measure(self, level: float, prior: list[LevelSample]) -> LevelSample:
        name = self.scenario.name
        where = f"{name} at {self.kind} {level:g}"
        if not self.server.is_alive():
            self.failure = (str(Outcome.crashed), f"server exited before {where}")
            return LevelSample(level, {}, 0, 0, error="server exited")
        self.server.before_run()
        number, self.next_number = self.next_number, self.next_number + 1
        started_at = time.time()
        sampler = self.server.sampler() if self.server.sampler is not None else None
        with sampler if sampler is not None else nullcontext():
            result, sample = self._measure_level(level, number, prior)
        if not self.server.is_alive():
            # Requests that died with the server are not a measurement of this config.
            self.failure = (str(Outcome.crashed), f"server died during {where}")
            return LevelSample(level, {}, 0, 0, error="server died")
        verdict = sample.stopped_verdict.value if sample.stopped_verdict else None
        summary = RunSummary.model_validate({**result.summary.to_dict(), LEVEL_KEY: level, "load": self.kind,
                                             "stopped_early": sample.stopped, "stopped_verdict": verdict})
        self.record(number, result.model_copy(update={"summary": summary}), started_at,
                    sampler.result if sampler is not None else None)
        if sample.error is not None:
            self.failure = (str(result.outcome), f"{where}: {result.error}")
        return sample

    def _measure_level(self, level: float, number: int, prior: list[LevelSample]) -> tuple[RunResult, LevelSample]:
        name = self.scenario.name
        return measure_level(
            self.server.url, self.scenario, self.slos, load=self.kind, level=level, run=number,
            num_prompts=self.plan.num_prompts, looks=self.plan.settings[name].looks, out_dir=self.runs_dir,
            run_id=f"trial{self.trial.seq:03d}-{name}-L{number:02d}", model=self.server.model,
            tokenizer_dir=self.tokenizer_dir, api_key=self.server.api_key,
            progress=lambda d, t: self.progress(name, number, d, t), prior=prior,
            kv_cache_tokens=self.server.kv_cache_tokens)


def capacity_summary(est: CapacityEstimate, kind: LoadKind, slos: list[Slo], levels_measured: int,
                     requests: int, level_runs: list[Run]) -> RunSummary:
    """The capacity Run's summary: the capacity with its interval (the search's, this boot only),
    and the output tokens per second served at it (for the cost per token)."""
    return RunSummary.model_validate({
        CAPACITY: est.capacity,
        "capacity_low": est.low,
        "capacity_high": est.high if math.isfinite(est.high) else None,   # None: no level violated
        "capacity_binding": est.binding,
        "load": kind,
        "slos": [str(s) for s in slos],
        "levels_measured": levels_measured,
        "requests": requests,
        "output_throughput_at_capacity": _output_throughput_at(est.capacity, kind, level_runs),
        "judgement": JUDGEMENT,
    })


def _output_throughput_at(capacity: float, kind: LoadKind, level_runs: list[Run]) -> float | None:
    """Output tokens/s at the capacity: an open loop serves what it is offered (the capacity in
    req/s times the tokens a request got); a closed loop or a trace what its runs at that level measured."""
    if capacity <= 0:
        return None
    ok = [r.summary for r in level_runs if r.outcome in (Outcome.ok, Outcome.client_bound)]
    if kind == "rate":
        per_request = [s["total_output_tokens"] / s["completed"] for s in ok
                       if s.get("completed") and s.get("total_output_tokens")]
        return capacity * fmean(per_request) if per_request else None
    at = [s["output_throughput"] for s in ok if s.get(LEVEL_KEY) == capacity and s.get("output_throughput")]
    return fmean(at) if at else None


