"""A capacity study's stored runs read as conclusions: which Runs are load levels and which hold a
scenario's capacity, a boot's levels judged again by today's rules, and a capacity censored at
either end as the bound it is (what the analysis, the report and `size` read of them).

A capacity trial (tune/capacity_trial.py) writes these Runs: each level's Run carries its load
level in its summary (`load_level`, `load`, `stopped_early`); the scenario's capacity is a Run of
its own (replicate 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..capacity.http import LoadKind, sample_from_records
from ..capacity.levels import LevelResult, LevelSample, judge_level
from ..capacity.sequential import Looks
from ..capacity.slo import Slo
from ..load.records import SummaryLike
from ..load.scenario import Scenario
from ..store import Run
from ..study.metrics import CAPACITY
from ..vocabulary import Outcome

CAPACITY_REPLICATE = 0      # the Run that holds a scenario's capacity on one boot
LEVEL_KEY = "load_level"    # in a level Run's summary: the offered rate or concurrency it ran at
# In a capacity Run's summary: the rules its levels were judged by. A capacity made by older
# rules is estimated again from its stored levels when the study resumes (tune/capacity_trial.py).
# 2: a percentile's bound stretched instead of infinite where clustering leaves too few values;
# 3: a closed loop's first wave (all users at once) is not judged (capacity.http.ramp_of);
# 4: each level judged at the alpha of the look it ended at (capacity/sequential.py);
# 5: the point estimate fitted to the share of values over a percentile's limit (capacity/pooled.py);
# 6: the interval intersected with that fit's own (capacity/estimate.py).
JUDGEMENT = 6


def load_kind(scenario: Scenario) -> LoadKind:
    """An open loop (a scenario with a rate) is searched by rate, a closed loop by concurrency, a
    trace by its speed-up."""
    if scenario.trace is not None:
        return "speedup"
    return "rate" if scenario.rate is not None else "concurrency"


def is_level_run(summary: SummaryLike) -> bool:
    return LEVEL_KEY in summary


def current_capacity_runs(runs: Sequence[Run], scenario: str) -> list[Run]:
    """The scenario's capacity Runs, one per trial: its latest attempt (a re-estimate supersedes)."""
    latest: dict[int, Run] = {}
    for r in runs:
        if (r.scenario == scenario and r.replicate == CAPACITY_REPLICATE and r.outcome == Outcome.ok
                and not is_level_run(r.summary) and CAPACITY in r.summary
                and (r.trial_id not in latest or r.attempt > latest[r.trial_id].attempt)):
            latest[r.trial_id] = r
    return list(latest.values())


def judged_levels(level_runs: list[Run], slos: list[Slo], looks: Looks, study_dir: Path) -> list[LevelResult]:
    """One boot's stored level runs of one scenario pooled per level, as the search pooled them,
    judged by today's rules; in the order the levels were first measured."""
    by_level: dict[float, list[LevelSample]] = {}
    for sample in stored_samples(level_runs, study_dir, slos):
        by_level.setdefault(sample.level, []).append(sample)
    return [judge_level(level, pooled, slos, looks) for level, pooled in by_level.items()]


def censoring(summary: SummaryLike) -> str:
    """How a capacity Run's capacity is censored: `right` when no level's estimates crossed an SLO
    and none violated one (the capacity is at least the top level measured), `left` when the
    estimates crossed already at the lowest level (capacity 0: at most that level), "" when the
    search bracketed it."""
    capacity = summary.get(CAPACITY)
    if not isinstance(capacity, (int, float)):
        return ""
    if capacity > 0 and summary.get("capacity_high") is None and summary.get("capacity_binding") is None:
        return "right"
    return "left" if capacity <= 0 else ""


def censored_value(summary: SummaryLike) -> float:
    """The capacity as a number the statistics can use: the bound where it is censored (capacity 0
    becomes the lowest violating level, an upper bound; NaN where no level violated), else the estimate."""
    if censoring(summary) == "left":
        high = summary.get("capacity_high")
        return float(high) if isinstance(high, (int, float)) else math.nan
    return float(summary[CAPACITY])


def interval_text(summary: SummaryLike) -> str:
    """A capacity Run's capacity and its search's interval: `12.9 [11.3, 13.5]`; a censored one as
    the bound it is, `≥ 64` (met every SLO up to the top level) or `≤ 1` (failed at the first)."""
    high = summary.get("capacity_high")
    kind = censoring(summary)
    if kind == "right":
        return f"≥ {summary[CAPACITY]:.3g}"
    if kind == "left":
        return "0 (failed at every level)" if high is None else f"≤ {high:.3g}"
    return (f"{summary[CAPACITY]:.3g} [{summary.get('capacity_low', 0):.3g}, "
            f"{'∞' if high is None else format(high, '.3g')}]")


def stored_samples(runs: list[Run], study_dir: Path, slos: list[Slo]) -> list[LevelSample]:
    """The measured levels of earlier boots of this trial, in the order they were measured."""
    out = []
    for run in sorted(runs, key=lambda r: r.replicate):
        if not is_level_run(run.summary) or run.outcome not in (str(Outcome.ok), str(Outcome.client_bound)):
            continue
        path = Path(run.records_path) if run.records_path else None
        if path is None:
            continue
        path = path if path.is_absolute() else study_dir / path
        if path.is_file():
            out.append(sample_from_records(float(run.summary[LEVEL_KEY]), path, run.summary.get("stopped_early"),
                                           run.summary.get("load", "rate"), run.summary.get("stopped_verdict"), slos))
    return out
