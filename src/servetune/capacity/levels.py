"""A load level as the search measures it: its runs (LevelSample), their values pooled and
judged against every SLO at the alpha of the look the level stands at (LevelResult), and the
`measure(level, prior)` seam through which a level is run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..stats.intervals import goodput_ci
from ..stats.types import Interval
from .sequential import Looks
from .slo import Judgement, Slo, Verdict, judge


@dataclass
class LevelSample:
    """One run at one load level. `values`: per metric (ttft, tpot, itl, e2el), one array of ms
    per completed request (ITL: that request's gaps; others: one value), and an infinite one per
    failed request, in the order they were sent."""

    level: float
    values: dict[str, list[np.ndarray]]
    sent: int
    completed: int
    stopped: str | None = None   # why the run was ended early (a look's verdict, an SLO surely lost, saturation)
    error: str | None = None     # the run could not measure (server failure): the search stops
    stopped_verdict: Verdict | None = None   # what the early end decided (None with `stopped`: violates)
    records: str | None = None   # the run's request records (JSONL), where it has them
    seconds: float = 0.0         # how long the run took
    good: np.ndarray | None = None   # per request sent, in order: met every per-request SLO (goodput)
    failed: int = 0              # ended without their answer (error, broken stream, deadline): in `values` as inf

    @property
    def early_verdict(self) -> Verdict | None:
        if self.stopped is None:
            return None
        return self.stopped_verdict or Verdict.violates


# measure(level, the level's earlier runs) -> one more run at it
Measure = Callable[[float, list[LevelSample]], LevelSample]


@dataclass
class LevelResult:
    level: float
    samples: list[LevelSample]
    judgements: list[Judgement]
    verdict: Verdict

    @property
    def requests(self) -> int:
        return sum(s.sent for s in self.samples)

    @property
    def completed(self) -> int:
        return sum(s.completed for s in self.samples)

    @property
    def stopped(self) -> str | None:
        return next((s.stopped for s in self.samples if s.stopped), None)

    def goodput(self, confidence: float) -> Interval | None:
        """Requests per second that met every per-request SLO, the level's runs pooled, with its
        interval (stats.intervals.goodput_ci); None where the runs hold no per-request flags."""
        flags = [s.good for s in self.samples if s.good is not None]
        if not flags or len(flags) < len(self.samples):
            return None
        return goodput_ci(np.concatenate(flags), sum(s.seconds for s in self.samples), confidence)

    @property
    def over_limit(self) -> bool:
        """Which side of the limit the level is on by its point estimates (for navigation)."""
        if self.verdict is not Verdict.undecided:
            return self.verdict is Verdict.violates
        return any(j.estimate > j.slo.limit_ms for j in self.judgements)


def pooled_values(samples: Sequence[LevelSample], metric: str) -> list[np.ndarray]:
    """One metric's values of a level's runs, pooled in the order the runs were made."""
    return [v for smp in samples for v in smp.values.get(metric, [])]


def judge_level(level: float, samples: list[LevelSample], slos: list[Slo], looks: Looks) -> LevelResult:
    """Pool the runs of one level and judge every SLO at the alpha of the look it stands at; a
    run ended early by the monitor gives the level the verdict that ended it (a look's, which
    counted the requests then in flight; every other early end is a sure loss or a runaway queue)."""
    alpha = looks.alpha_for(len(samples), samples[-1].stopped is not None)
    judgements = [judge(s, pooled_values(samples, s.metric), alpha, seed=i) for i, s in enumerate(slos)]
    early = [smp.early_verdict for smp in samples if smp.stopped]
    if Verdict.violates in early or any(j.verdict is Verdict.violates for j in judgements):
        verdict = Verdict.violates
    elif Verdict.meets in early or all(j.verdict is Verdict.meets for j in judgements):
        verdict = Verdict.meets
    else:
        verdict = Verdict.undecided
    return LevelResult(level, samples, judgements, verdict)
