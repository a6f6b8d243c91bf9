"""Looks at a level while it runs, and the alpha each look may spend.

A level is judged at the end of its first run (the planned look, where a fixed-length level
would be judged) and also at interim looks: every 1 / `looks_per_run` of each run's requests,
and through the runs pooled at an undecided level. Each look judges the SLOs on the values so far
with its own alpha; by Bonferroni the chance that any look calls a wrong verdict is at most the
sum of the looks' alphas, which is `alpha`. The planned look keeps most of it (PLANNED_SHARE), so
a level that runs its full length is judged nearly as a fixed-length one; the interim looks share
the rest. A level whose statistic is far from its limit is decided at an interim look and ends
there; one near its limit runs on, as before.

`looks_per_run` 1 is the fixed-length rule: each run's end judged at alpha (no interim looks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .slo import Judgement, Slo, Verdict, judge

# The share of alpha the planned look (first run's end) keeps; the interim looks share the rest.
# 0.75 leaves a p99 decidable at 500 requests (396 needed, against 368 at the full 0.05).
PLANNED_SHARE = 0.75
LOOKS_PER_RUN = 5   # the default: a look every fifth of a run


@dataclass(frozen=True)
class Looks:
    alpha: float            # the level's whole error budget, each verdict's side alpha / 2
    looks_per_run: int      # looks in one run, its end included (1: none before the end)
    max_runs: int           # runs pooled at an undecided level, at most

    @property
    def sequential(self) -> bool:
        return self.looks_per_run > 1

    @property
    def planned_alpha(self) -> float:
        """The alpha of the first run's end, where a level of planned length is judged."""
        return self.alpha * PLANNED_SHARE if self.sequential else self.alpha

    @property
    def interim_alpha(self) -> float:
        """The alpha of every other look: the interim ones and each further run's end."""
        if not self.sequential:
            return self.alpha
        others = self.looks_per_run * self.max_runs - 1
        return self.alpha * (1 - PLANNED_SHARE) / others

    def alpha_for(self, runs: int, ended_early: bool) -> float:
        """The alpha of the look a level stands at after `runs` runs, the last one ended at an
        interim look (`ended_early`) or at its planned end."""
        return self.planned_alpha if runs == 1 and not ended_early else self.interim_alpha

    def look_points(self, planned: int) -> list[int]:
        """Values judged (of `planned` in one run) at which an interim look is taken in that run."""
        if not self.sequential or planned < self.looks_per_run:
            return []
        return sorted({round(planned * k / self.looks_per_run) for k in range(1, self.looks_per_run)})


# An interim look judges at least this many values: two of slo.py's consecutive batches, the
# fewest in which its correction for clustered (slow-spell) values can see anything; on fewer,
# an interval takes the values as independent and is too narrow near capacity.
MIN_LOOK_VALUES = 100

# A request still in flight at an interim look counts, for a "met" call, as a value over every
# limit: the finished ones are the fast ones, and those still waiting may be the slow tail.
_IN_FLIGHT_OVER = 2.0


class InterimLooks:
    """The interim looks of one run at one level: fed each finished request's values (and its
    ITL gaps), in the order they end, it judges the pooled values (the level's earlier runs,
    `prior`, and this run's so far, in the order they were sent) at each look point, and names a
    verdict once one is decided at the interim alpha: violated on the values that ended, met
    only with the requests in flight counted over their limits (for ITL, each with as many gaps
    as a finished request has on average)."""

    def __init__(self, slos: list[Slo], looks: Looks, planned: int, prior: Mapping[str, list[np.ndarray]]) -> None:
        self.slos, self.alpha = slos, looks.interim_alpha
        self.points = set(looks.look_points(planned))
        self.prior = prior
        self.values: dict[str, list[tuple[int, np.ndarray]]] = {}
        self.finished = 0

    def observe(self, index: int, values_ms: Mapping[str, float], in_flight: int,
                gaps_ms: np.ndarray | None = None) -> tuple[Verdict, str] | None:
        self.finished += 1
        for metric, value in values_ms.items():
            self.values.setdefault(metric, []).append((index, np.array([value])))
        if gaps_ms is not None and len(gaps_ms):
            self.values.setdefault("itl", []).append((index, np.asarray(gaps_ms, dtype=np.float64)))
        pooled = self.finished + sum(len(v) for v in self.prior.get("ttft", []))
        if self.finished not in self.points or pooled < MIN_LOOK_VALUES:
            return None
        judged = {s: self._judge(s, 0) for s in self.slos}
        lost = [j for j in judged.values() if j.verdict is Verdict.violates]
        if lost:
            j = lost[0]
            return Verdict.violates, (f"violated at look {self.finished}/{j.n}: {j.slo.key} >= {j.low:.1f} ms "
                                      f"(alpha {self.alpha:.2g})")
        if all(self._judge(s, in_flight).verdict is Verdict.meets for s in self.slos):
            worst = max(judged.values(), key=lambda j: j.high / j.slo.limit_ms)
            return Verdict.meets, (f"met at look {self.finished}: {worst.slo.key} <= {worst.high:.1f} ms "
                                   f"with {in_flight} in flight counted over (alpha {self.alpha:.2g})")
        return None

    def _judge(self, slo: Slo, in_flight: int) -> Judgement:
        if slo.metric not in self.values:
            return judge(slo, [], self.alpha)   # nothing of this metric fed: undecided
        ours = [v for _, v in sorted(self.values[slo.metric], key=lambda iv: iv[0])]
        per_request = max(math.ceil(np.mean([len(v) for v in ours])), 1)
        pad = [np.full(per_request, slo.limit_ms * _IN_FLIGHT_OVER)] * in_flight
        return judge(slo, list(self.prior.get(slo.metric, [])) + ours + pad, self.alpha)


def worth_another_run(judgements: list[Judgement], looks: Looks, runs: int) -> bool:
    """Whether pooling another run at a level still undecided after `runs` can be expected to
    decide it: only where, for some undecided SLO, the distance of its estimate from the limit
    outgrows the interval's half width once that shrinks as 1 / sqrt(values) up to `max_runs`
    runs at the interim alpha (an interval without that side yet: always). A level whose estimate
    sits closer to its limit than that stays undecided (the search moves on; its runs still count
    for the point estimate): it cannot stop a wrong verdict, only spare runs that would not have
    given one. The search pools a second run at a level near the crossing regardless (search.py)."""
    if runs >= looks.max_runs:
        return False
    z_now = stats.norm.ppf(1 - looks.alpha_for(runs, False) / 2)
    z_then = stats.norm.ppf(1 - looks.interim_alpha / 2)
    shrink = math.sqrt(runs / looks.max_runs) * z_then / z_now
    for j in judgements:
        if j.verdict is not Verdict.undecided or not j.n or not math.isfinite(j.estimate):
            continue
        half = _half_width_toward_limit(j)
        if not math.isfinite(half) or abs(j.estimate - j.slo.limit_ms) > half * shrink:
            return True
    return False


def _half_width_toward_limit(j: Judgement) -> float:
    """The distance from the estimate to the interval's end on the limit's side."""
    return (j.high - j.estimate) if j.estimate <= j.slo.limit_ms else (j.estimate - j.low)

