"""The load-level search: bracket, then bisect, over a `measure(level)` callable.

`measure(level, prior)` runs one load level (an arrival rate, a concurrency, or any load axis
whose latency rises with the level) and returns what it measured; `prior` holds the level's
earlier runs, which its interim looks pool with (sequential.py). It is the seam between the
search and how a level is run: `http.py` drives a server, the tests a simulated queue, a study
runs it on one boot and stores each level as a Run. Every level measured is kept; a level whose
SLO verdict is undecided is measured again (pooled) up to `max_runs_per_level` times, each run
ending as soon as a look decides the level. Navigation follows the point estimates (which side
of the limit a level is on); the interval (estimate.py) uses only the levels the statistics decide
and the crossing fitted to the levels near it. The bisection stops once the bracket, or that
interval, is `rel_tol` narrow; a level beyond the bracket is measured only for an end of the
interval that neither a decided level nor the fit gives.

With interim looks (the default) the search goes up in steps of `growth` (a level far over the
capacity is lost within a few requests) and down in steps of sqrt(growth) (a level far under it
takes long to send, and no look can end it before a percentile has its run's requests). A level
between the bracket's ends, or one found while bracketing whose statistic lies near its limit
(the levels the point estimate is fitted to), is pooled a second time when undecided; any other
level only where more runs can be expected to decide it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from .estimate import CapacityEstimate, estimate
from .levels import LevelResult, LevelSample, Measure, judge_level, pooled_values
from .sequential import LOOKS_PER_RUN, Looks, worth_another_run
from .slo import Slo, Verdict, judge


class Role(Enum):
    """A level's role in the search: it moves the bracket while bracketing (doubling, or stepping
    down), splits it while bisecting, or lies beyond it, measured only for the interval's end."""

    BRACKETING = "bracketing"
    BISECTING = "bisecting"
    BEYOND = "beyond"


# A bracketing level whose statistic's likely range (its interval at LIKELY_ALPHA) comes within
# NEAR_LIMIT of the limit is measured a second time.
NEAR_LIMIT = 1.2
LIKELY_ALPHA = 0.5


def narrow(est: CapacityEstimate, rel_tol: float) -> bool:
    """Whether the capacity's interval (the fitted crossing's included) is already as narrow as
    the bracket a bisection aims for: another level would sharpen the point, no longer the
    answer. (Measured: the simulated benchmark's error unchanged with 0.8 % fewer requests; at
    2 rel_tol its bursty regime's median error grew from 5.4 % to 6.2 %.)"""
    return est.bounded and est.high / est.low - 1 <= rel_tol


def near_limit(judged: LevelResult) -> bool:
    """Whether some SLO's statistic may lie within NEAR_LIMIT of its limit: its interval at
    LIKELY_ALPHA (the middle half of where it may be) reaches that band. Such a level's values
    are what the point estimate is fitted to; a level surely far from the limit says little
    about the crossing. The range, not the estimate alone: a short run's percentile swings
    (200 bursty requests' p95 by a third), and a level on the crossing may read far from it."""
    for i, j in enumerate(judged.judgements):
        likely = judge(j.slo, pooled_values(judged.samples, j.slo.metric), LIKELY_ALPHA, seed=i)
        if likely.high >= j.slo.limit_ms / NEAR_LIMIT and likely.low <= j.slo.limit_ms * NEAR_LIMIT:
            return True
    return False


@dataclass(frozen=True)
class SearchSettings:
    start: float                    # first level tried
    min_level: float                # lowest level tried (rate > 0; concurrency >= 1)
    max_level: float                # highest level tried
    integer: bool = False           # concurrency: whole levels, the search ends at adjacent ones
    growth: float = 2.0             # bracketing step (factor)
    rel_tol: float = 0.05           # bisect until the bracket is this narrow (relative)
    alpha: float = 0.05             # confidence of each level's SLO intervals: 1 - alpha
    max_levels: int = 12            # distinct levels measured, at most
    max_runs_per_level: int = 3     # runs pooled at an undecided level, at most
    looks_per_run: int = LOOKS_PER_RUN   # looks at a run's verdict, its end included (1: at its end only)

    @property
    def looks(self) -> Looks:
        return Looks(self.alpha, self.looks_per_run, self.max_runs_per_level)


# Highest level tried when none is given: an open loop's req/s, a closed loop's users.
# A trace's speed-up is searched like a rate (continuous, from 1: the traffic as recorded).
DEFAULT_MAX_LEVEL = {"rate": 1000.0, "concurrency": 1024.0, "speedup": 100.0}


def settings_for(load: str, *, start: float | None, max_level: float | None, alpha: float, rel_tol: float,
                 max_levels: int, max_runs_per_level: int, looks_per_run: int = LOOKS_PER_RUN) -> SearchSettings:
    """Settings of a search of `load` (rate or concurrency): whole levels for a concurrency; the
    first level 1 and the highest DEFAULT_MAX_LEVEL unless given."""
    integer = load == "concurrency"
    top = DEFAULT_MAX_LEVEL[load] if max_level is None else max_level
    # A start taken from the scenario's own load may lie above a given max_level: begin at the top.
    return SearchSettings(start=1.0 if start is None else min(start, top), min_level=1.0 if integer else 1e-3,
                          max_level=top,
                          integer=integer, alpha=alpha, rel_tol=rel_tol, max_levels=max_levels,
                          max_runs_per_level=max_runs_per_level, looks_per_run=looks_per_run)


@dataclass
class SearchResult:
    levels: list[LevelResult] = field(default_factory=list)   # in the order measured
    error: str | None = None

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.levels)

    @property
    def seconds(self) -> float:
        return sum(smp.seconds for r in self.levels for smp in r.samples)


def search(measure: Measure, slos: list[Slo], settings: SearchSettings,
           on_level: Callable[[SearchResult], None] | None = None, result: SearchResult | None = None) -> SearchResult:
    """Find the highest level at which every SLO holds; returns every level measured, in
    `result` when given (so that a caller interrupted mid-search still holds what was done).
    `on_level(result)` is called as each level is judged."""
    result = SearchResult() if result is None else result
    st = settings

    def again(judged: LevelResult, runs: int, role: Role) -> bool:
        if runs >= st.max_runs_per_level:
            return False
        if not st.looks.sequential:
            return True
        # A level between the bracket's ends, or one of its ends near the limit, gets a second
        # run even when that cannot decide it: the point estimate is fitted to the levels near
        # the crossing (pooled.py). A level measured only for the interval's end does not.
        forced = role is Role.BISECTING or (role is Role.BRACKETING and near_limit(judged))
        return (runs < 2 and forced) or worth_another_run(judged.judgements, st.looks, runs)

    down = math.sqrt(st.growth) if st.looks.sequential else st.growth

    def visit(level: float, role: Role) -> LevelResult | None:
        samples: list[LevelSample] = []
        while True:
            sample = measure(level, list(samples))
            if sample.error is not None:
                result.error = f"level {level:g}: {sample.error}"
                return None
            samples.append(sample)
            judged = judge_level(level, samples, slos, st.looks)
            if judged.verdict is not Verdict.undecided or not again(judged, len(samples), role):
                result.levels.append(judged)
                if on_level is not None:
                    on_level(result)
                return judged

    def snap(level: float) -> float:
        level = min(max(level, st.min_level), st.max_level)
        return float(round(level)) if st.integer else level

    below, above = -math.inf, math.inf   # the bracket by point estimates
    judged_at: dict[float, LevelResult] = {}
    level = snap(st.start)
    while len(result.levels) < st.max_levels:   # bracketing
        r = visit(level, Role.BRACKETING)
        if r is None:
            return result
        judged_at[level] = r
        if r.over_limit:
            above = level
            nxt = snap(level / down)
        else:
            below = level
            nxt = snap(level * st.growth)
        if math.isfinite(below) and math.isfinite(above):
            break
        if nxt == level:  # at the edge of the range: the capacity is outside it
            return result
        level = nxt
    while len(result.levels) < st.max_levels:   # bisection
        if st.looks.sequential and judged_at[below].verdict is judged_at[above].verdict is Verdict.undecided:
            # Both ends were measured until more runs could not be expected to decide them: a
            # level between them would stay undecided too, and only cost time.
            break
        if st.integer:
            if above - below <= 1:
                break
            level = float(math.floor((below + above) / 2))
        else:
            if (above - below) / below <= st.rel_tol:
                break
            if narrow(estimate(result.levels, st.integer, st.alpha), st.rel_tol):
                break
            level = math.sqrt(below * above)
        r = visit(level, Role.BISECTING)
        if r is None:
            return result
        judged_at[level] = r
        if r.over_limit:
            above = level
        else:
            below = level
    # The bracket follows point estimates; the interval needs an end on each side: a level
    # decided there, or the fitted crossing's bound (estimate.py), which makes a level there
    # unnecessary. Steps beyond the bracket give a side with neither its decided level: with
    # looks, steps of sqrt(growth), since a level far under the capacity takes long to send (a
    # rate half the capacity's takes twice as long a request) and one a little under it is
    # decided already.
    step = down
    while len(result.levels) < st.max_levels:
        measured = {r.level for r in result.levels}
        bounds = estimate(result.levels, st.integer, st.alpha)
        if not any(r.verdict is Verdict.violates for r in result.levels) and math.isfinite(above) \
                and not math.isfinite(bounds.high):
            level = snap(max(r.level for r in result.levels) * step)
        elif not any(r.verdict is Verdict.meets for r in result.levels) and math.isfinite(below) and bounds.low <= 0:
            level = snap(min(r.level for r in result.levels) / step)
        else:
            break
        if level in measured:
            break
        if visit(level, Role.BEYOND) is None:
            return result
    return result
