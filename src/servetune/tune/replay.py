"""Replay the search strategies against an exhaustive grid study: a tabular benchmark.

A grid study measured every config of its space, so its store answers any strategy's question
"what does this config give?" without a GPU (HPOBench's and NAS-Bench's tabular benchmarks work
the same way). `GridTable.from_store` keeps, per config, its objective samples as the study
computed them (`analysis.scored_trials`: drift-aware ratios to the baseline of the trial's slot)
and the recorded time of one trial of it (boot: healthy_at - started_at, or until the end for a
failed boot; measuring: every run's ended_at - started_at).

`replay` then runs one strategy as the runner would: the baseline first, a baseline re-measurement
every `baseline_every` candidates (booted before the next candidate that boots, never after the
last), and the strategy's proposals until it stops or the candidate budget is spent. The
strategy is the real class from `search.STRATEGIES`, asked through `propose(history)`; grid is
visited in a random order per seed (its Gray-code order would give the same answer for every
seed).

Each seed is one resampled world, shared by every strategy so that they are compared on the same
draws: a replayed trial of a config gets as many replicates as one of its boots had, each its
recorded mean times (1 + a residual) drawn with replacement from the study's pooled replicate
residuals (every boot's samples relative to that boot's mean, scaled by sqrt(n / (n - 1)) for
the mean they were taken around). Resampling a config's own two or three replicates instead
would hand a strategy two identical values half the time, a spread of zero that makes every
Welch test certain. Boot-to-boot variation is not redrawn: a replayed trial's mean is its config's
recorded mean, so a study whose boots differ more than its replicates replays as less noisy than
it was. A strategy has reached the target once it has measured
a config whose true objective (the mean of all its recorded samples) is within `within_pct` % of
the grid's best feasible config; what it cost to get there is counted in boots (the baseline and
its re-measurements included) and in recorded trial time. OFAT's answer depends on the parameter
it walks first, so it gets a row per first parameter (`variants`).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any, cast

import numpy as np

from ..analysis import analysis, known
from ..errors import ServetuneError
from ..search import STRATEGIES, Grid, Strategy, TrialView, stopping
from ..store import StudyStore, Trial
from ..study.spec import Stopping, StudySpec
from ..vocabulary import Outcome


class ShuffledGrid(Grid):
    """The grid in a random order drawn from the study's seed: what an exhaustive search costs on
    average, rather than in one fixed order."""

    def combinations(self) -> Iterator[dict[str, Any]]:
        combos = list(super().combinations())
        random.Random(self.study.seed).shuffle(combos)
        yield from combos


@dataclass(frozen=True)
class Entry:
    """One config of the grid: its recorded outcome, samples and the time one trial of it took."""

    key: str
    label: str
    outcome: Outcome
    samples: tuple[float, ...]   # objective samples of every boot of the config, pooled
    per_boot: int                # samples one replayed trial draws (the replicates of one boot)
    feasible: bool
    booted: bool                 # False: the study decided it without a boot (duplicate, skipped)
    trial_s: float               # mean recorded time of one of its trials (0 when not booted)
    measure_s: float = 0.0       # of which measuring: every run of the trial (the rest is its boot)

    @property
    def usable(self) -> bool:
        return self.outcome is Outcome.ok and self.feasible and bool(self.samples)

    @property
    def true_value(self) -> float | None:
        return fmean(self.samples) if self.usable else None


def trial_seconds(trial: Trial) -> float:
    """Recorded device time of one trial: its boot (to healthy, or to its end when it never got
    there) and every run measured on it, retries included."""
    if not known.was_booted(trial):
        return 0.0
    end = trial.healthy_at if trial.healthy_at is not None else (trial.ended_at or trial.started_at)
    return (end - trial.started_at) + sum(r.wall_s for r in trial.runs)


@dataclass(frozen=True)
class GridTable:
    spec: StudySpec
    entries: dict[str, Entry]    # config key -> entry
    baseline_key: str
    grid_s: float                # the whole study's recorded trial time
    grid_boots: int              # booted trials of the whole study
    residuals: tuple[float, ...]  # replicate noise relative to the boot's mean, pooled (docstring)

    @classmethod
    def from_store(cls, store: StudyStore, spec: StudySpec, where: str = "") -> GridTable:
        where = where or str(store.path)
        trials = [t for t in store.trials() if t.done]
        scored = analysis.scored_trials(trials, spec, store.path.parent)
        by_key: dict[str, list[Trial]] = defaultdict(list)
        for t in trials:
            by_key[t.config.key()].append(t)
        baseline = spec.baseline_config()
        entries = {key: _entry(key, group, scored, baseline.key(), spec) for key, group in by_key.items()}
        table = cls(spec, entries, baseline.key(), sum(trial_seconds(t) for t in trials),
                    sum(known.was_booted(t) for t in trials), _residuals([xs for xs, _ in scored.values()]))
        table._check_complete(where)
        return table

    def _check_complete(self, where: str) -> None:
        grid = Grid(self.spec)
        grid.check()  # a space that cannot be enumerated is no grid: one-line error
        wanted = [grid.config(p) for p in grid.combinations()]
        missing = [c for c in wanted if grid.allowed(c) and c.key() not in self.entries]
        if self.baseline_key not in self.entries or not self.entries[self.baseline_key].usable:
            raise ServetuneError(f"{where}: the study's baseline has no usable measurement; nothing to replay against")
        if missing:
            labels = ", ".join(c.label(self.spec.baseline_config()) for c in missing[:3])
            raise ServetuneError(f"{where}: the study measured {len(wanted) - len(missing)} of the {len(wanted)} "
                                 f"configs of its space; a replay needs every one (missing: {labels}"
                                 f"{', ...' if len(missing) > 3 else ''})")

    @property
    def best(self) -> Entry:
        return max((e for e in self.entries.values() if e.usable), key=lambda e: e.true_value or 0.0)

    def targets(self, within_pct: float) -> set[str]:
        """Keys of the feasible configs whose true objective is within `within_pct` % of the best."""
        floor = (self.best.true_value or 0.0) * (1 - within_pct / 100)
        return {k for k, e in self.entries.items() if e.usable and (e.true_value or 0.0) >= floor}

    def lookup(self, params: Mapping[str, Any]) -> Entry:
        config = self.spec.config_for(dict(params))
        entry = self.entries.get(config.key())
        if entry is None:
            raise ServetuneError(f"the grid study never measured {config.label(self.spec.baseline_config())}")
        return entry

    def candidates(self) -> int:
        """Configs of the grid a strategy may propose: all but the baseline."""
        return len(self.entries) - 1

    def world(self, seed: int) -> dict[str, tuple[float, ...]]:
        """One replayed trial's samples per config (module docstring), fixed by `seed`."""
        rng = np.random.default_rng(seed)
        out: dict[str, tuple[float, ...]] = {}
        for key, e in sorted(self.entries.items()):
            noise = rng.choice(self.residuals, size=e.per_boot, replace=True)
            out[key] = tuple(float(fmean(e.samples) * (1 + r)) for r in noise) if e.samples else ()
        return out


def _residuals(boots: list[list[float]]) -> tuple[float, ...]:
    """Each boot's samples relative to its mean, widened by sqrt(n / (n - 1)); (0.0,) when no boot
    has two samples to show the noise."""
    out = []
    for xs in boots:
        m = fmean(xs) if len(xs) > 1 else 0.0
        if m > 0:
            out += [(x / m - 1) * math.sqrt(len(xs) / (len(xs) - 1)) for x in xs]
    return tuple(out) or (0.0,)


def _entry(key: str, group: list[Trial], scored: dict[int, tuple[list[float], bool]], baseline_key: str,
           spec: StudySpec) -> Entry:
    booted = [t for t in group if known.was_booted(t)]
    first = booted[0] if booted else group[0]
    samples = [x for t in group for x in scored.get(t.id, ([], False))[0]]
    boots_with_samples = [t for t in group if scored.get(t.id, ([], False))[0]]
    outcome = Outcome(first.outcome or Outcome.crashed)
    return Entry(
        key=key,
        label=first.config.label(spec.baseline_config()) if key != baseline_key else "baseline",
        outcome=outcome,
        samples=tuple(samples),
        per_boot=max(1, round(len(samples) / max(len(boots_with_samples), 1))),
        feasible=all(t.ok and scored.get(t.id, ([], False))[1] for t in group),
        booted=bool(booted),
        trial_s=fmean(trial_seconds(t) for t in booted) if booted else 0.0,
        measure_s=fmean(sum(r.wall_s for r in t.runs) for t in booted) if booted else 0.0,
    )


@dataclass(frozen=True)
class SeedResult:
    """One strategy on one seed: when it first measured a target config (None: never), and what
    it spent in all before it stopped or ran out of budget."""

    seed: int
    reached_boots: int | None
    reached_s: float | None
    boots: int
    spent_s: float
    proposed: tuple[str, ...]    # labels of the configs it proposed, in order
    leader: str | None = None    # key of the config with the best replayed mean when it ended
    stopped_by_rule: bool = False  # the stopping rule ended it (not the strategy or the budget)
    raced: int = 0               # candidates whose measuring racing cut short


def make_replayed(table: GridTable, name: str, seed: int, order: Sequence[str] | None = None) -> Strategy:
    """The registered strategy `name` on the study's spec with the replay's seed (grid: shuffled),
    its space walked in `order` (default: the stored spec's)."""
    if name not in STRATEGIES:
        raise ServetuneError(f"--strategies: unknown strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})")
    space = table.spec.space if order is None else {n: table.spec.space[n] for n in order}
    spec = table.spec.model_copy(update={"strategy": name, "seed": seed, "space": space})
    strategy = ShuffledGrid(spec) if name == "grid" else STRATEGIES[name](spec)
    strategy.check()
    return cast(Strategy, strategy)  # every registered class proposes (search.registry does the same)


def variants(table: GridTable, names: Sequence[str]) -> list[tuple[str, str, tuple[str, ...] | None]]:
    """(row label, strategy, parameter order) per row. OFAT's answer depends on which parameter it
    walks first, and a stored spec keeps its space in alphabetical order, not the study file's: so
    OFAT gets one row per parameter first (the others after it in the stored order)."""
    params = list(table.spec.space)
    rows: list[tuple[str, str, tuple[str, ...] | None]] = []
    for name in names:
        if name in ORDER_DEPENDENT and len(params) > 1:
            rows += [(f"{name} ({p} first)", name, (p, *[q for q in params if q != p])) for p in params]
        else:
            rows.append((name, name, None))
    return rows


ORDER_DEPENDENT = frozenset({"ofat"})


@dataclass(frozen=True)
class Economy:
    """What a replay may save beyond the strategy's own order (off by default: today's study).

    `stop_below`: the search's stopping rule (search/stopping.py) with this threshold, asked before
    every proposal. `race`: a candidate whose first replicate is clearly worse than the leader,
    below the leader's mean by more than the minimum effect plus `race_sds` replicate standard
    deviations (the pooled residuals'), is measured no further: it is charged its boot and that
    one replicate, and the strategy sees that one sample."""

    stop_below: float | None = None
    race: bool = False
    race_sds: float = 3.0


def replay(table: GridTable, name: str, seed: int, *, budget: int, within_pct: float,
           order: Sequence[str] | None = None, economy: Economy | None = None) -> SeedResult:
    """Run strategy `name` against the table as the runner would (module docstring)."""
    economy = economy or Economy()
    strategy = make_replayed(table, name, seed, order)
    world = table.world(seed)
    targets = table.targets(within_pct)
    base = table.entries[table.baseline_key]
    rule_spec = table.spec.model_copy(update={"stopping": Stopping(chance_below=economy.stop_below)})
    race_margin = table.spec.min_effect_pct / 100 + economy.race_sds * float(np.std(table.residuals))
    history = [TrialView(params={}, samples=world[base.key], feasible=base.feasible)]
    boots, spent = 1, base.trial_s
    reached = (boots, spent) if base.key in targets else None
    candidates = since_baseline = raced = 0
    stopped = False
    proposed: list[str] = []
    while candidates < budget:
        if economy.stop_below is not None and stopping.assess(rule_spec, history).stops:
            stopped = True
            break
        proposal = strategy.propose(history)
        if proposal is None:
            break
        entry = table.lookup(proposal.params)
        if since_baseline >= table.spec.baseline_every and entry.booted:  # the runner re-measures here
            boots, spent, since_baseline = boots + 1, spent + base.trial_s, 0
        proposed.append(entry.label)
        samples = world[entry.key] if entry.outcome is Outcome.ok else ()
        cost = entry.trial_s
        leader_mean = _leader(table, history)[1]
        if (economy.race and len(samples) > 1 and leader_mean is not None
                and samples[0] < leader_mean * (1 - race_margin)):
            cost -= entry.measure_s * (1 - 1 / len(samples))
            samples, raced = samples[:1], raced + 1
        history.append(TrialView(params=proposal.params, outcome=entry.outcome, samples=samples,
                                 feasible=entry.feasible))
        if entry.booted:  # a trial decided without a boot is free and not counted, as in a study
            boots, spent = boots + 1, spent + cost
            candidates, since_baseline = candidates + 1, since_baseline + 1
        if reached is None and entry.key in targets:
            reached = (boots, spent)
    return SeedResult(seed, reached[0] if reached else None, reached[1] if reached else None, boots, spent,
                      tuple(proposed), leader=_leader(table, history)[0], stopped_by_rule=stopped, raced=raced)


def _leader(table: GridTable, history: Sequence[TrialView]) -> tuple[str | None, float | None]:
    """The config key with the best mean over the history's usable samples, and that mean."""
    pooled: dict[str, list[float]] = defaultdict(list)
    for view in history:
        if view.usable:
            pooled[table.spec.config_for(dict(view.params)).key()] += view.samples
    if not pooled:
        return None, None
    key = max(pooled, key=lambda k: fmean(pooled[k]))
    return key, fmean(pooled[key])


@dataclass(frozen=True)
class Summary:
    """One strategy over every seed. Quantiles are order statistics over all seeds, a seed that
    never reached the target counting as infinitely expensive: a median of None means it failed
    on half the seeds or more."""

    strategy: str
    seeds: int
    reached_share: float
    boots_median: float | None
    boots_p90: float | None
    minutes_median: float | None
    minutes_p90: float | None
    spent_minutes_median: float
    times_cheaper: float | None  # the whole grid's time over the median time to the target


def quantile(values: Sequence[float | None], q: float) -> float | None:
    """The q-quantile as an order statistic (the ceil(q * n)-th smallest); None stands for +inf."""
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def summarize(table: GridTable, name: str, results: Sequence[SeedResult]) -> Summary:
    boots = [float(r.reached_boots) if r.reached_boots is not None else None for r in results]
    minutes = [r.reached_s / 60 if r.reached_s is not None else None for r in results]
    median_min = quantile(minutes, 0.5)
    return Summary(
        strategy=name,
        seeds=len(results),
        reached_share=sum(r.reached_boots is not None for r in results) / len(results),
        boots_median=quantile(boots, 0.5),
        boots_p90=quantile(boots, 0.9),
        minutes_median=median_min,
        minutes_p90=quantile(minutes, 0.9),
        spent_minutes_median=float(np.median([r.spent_s / 60 for r in results])),
        times_cheaper=table.grid_s / 60 / median_min if median_min else None,
    )


def benchmark(table: GridTable, strategies: Sequence[str], seeds: int, *, budget: int | None = None,
              within_pct: float = 2.0, economy: Economy | None = None) -> dict[str, tuple[Summary, list[SeedResult]]]:
    """Every strategy on seeds 0 .. seeds-1 (the same resampled worlds for each)."""
    if seeds < 1:
        raise ServetuneError(f"--seeds: {seeds}; at least 1")
    if not 0 <= within_pct < 100:
        raise ServetuneError(f"--within-pct: {within_pct}; between 0 and 100")
    limit = table.candidates() if budget is None else budget
    out = {}
    for row, name, order in variants(table, strategies):
        results = [replay(table, name, seed, budget=limit, within_pct=within_pct, order=order, economy=economy)
                   for seed in range(seeds)]
        out[row] = (summarize(table, row, results), results)
    return out


@dataclass(frozen=True)
class Saving:
    """One strategy with an `Economy` against the same strategy without one, seed by seed on the
    same worlds: the device time each spent in all (to the search's end: the study's verdict
    where, as on the replayed grid, no finalist is booted after it), and whether both named the
    same leader."""

    strategy: str
    seeds: int
    today_minutes_median: float
    minutes_median: float
    ratio: float                 # minutes_median / today_minutes_median
    boots_median: float
    same_leader_share: float     # the leader is the config the run without economy ended with
    as_good_share: float         # its true objective within the minimum effect of that config's, or better
    near_best_share: float       # the leader is within `within_pct` % of the grid's best
    stopped_share: float         # the stopping rule ended it
    raced_median: float


def _as_good(table: GridTable, leader: str | None, today: str | None) -> bool:
    """`leader`'s true objective is at least `today`'s less the study's minimum effect: a winner
    the full study could not call worse than its own."""
    if today is None:
        return leader is None
    if leader is None:
        return False
    floor = (table.entries[today].true_value or 0.0) * (1 - table.spec.min_effect_pct / 100)
    return (table.entries[leader].true_value or 0.0) >= floor


def savings(table: GridTable, strategies: Sequence[str], seeds: int, economy: Economy, *,
            budget: int | None = None, within_pct: float = 2.0) -> list[Saving]:
    """Every strategy with and without `economy` on seeds 0 .. seeds-1."""
    today = benchmark(table, strategies, seeds, budget=budget, within_pct=within_pct)
    cheaper = benchmark(table, strategies, seeds, budget=budget, within_pct=within_pct, economy=economy)
    targets = table.targets(within_pct)
    out = []
    for row, (_, before) in today.items():
        after = cheaper[row][1]
        old = float(np.median([r.spent_s for r in before])) / 60
        new = float(np.median([r.spent_s for r in after])) / 60
        out.append(Saving(
            strategy=row, seeds=seeds, today_minutes_median=old, minutes_median=new, ratio=new / old if old else 1.0,
            boots_median=float(np.median([r.boots for r in after])),
            same_leader_share=fmean(a.leader == b.leader for a, b in zip(after, before, strict=True)),
            as_good_share=fmean(_as_good(table, a.leader, b.leader) for a, b in zip(after, before, strict=True)),
            near_best_share=fmean(a.leader in targets for a in after),
            stopped_share=fmean(a.stopped_by_rule for a in after),
            raced_median=float(np.median([a.raced for a in after])),
        ))
    return out


__all__ = ["Economy", "Entry", "GridTable", "Saving", "SeedResult", "ShuffledGrid", "Summary", "benchmark",
           "make_replayed", "quantile", "replay", "savings", "summarize", "trial_seconds", "variants"]
