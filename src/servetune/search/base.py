"""The Strategy protocol and what every strategy shares.

The runner asks `strategy.propose(history)` for the next Config to try, one at a time, and gets
a `Proposal` or None when the strategy has nothing left. A strategy keeps no state between calls:
everything it decides follows from the study, its seed and the history, which the runner rebuilds
from the store after a resume, so a killed study goes on exactly where it stopped.

`history` holds every finished trial in the order they ran, the baseline's (params `{}`) and
re-measurements included, and then the trials still running on other slots (`running=True`, no
samples yet): a strategy never hands out a config that is running, and may return None while the
running trials decide what comes next (the runner asks again once one finishes; None with nothing
running means the strategy is done). Strategies propose candidates only; the runner measures the
baseline and interleaves its re-measurements itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, ClassVar, Protocol

from ..engine.config import Config
from ..store.model import Trial
from ..study.constraints import config_value
from ..study.spec import StudySpec
from ..vocabulary import Outcome


@dataclass(frozen=True)
class TrialView:
    """What a strategy sees of one trial.

    `params` are the parameter values the trial was proposed with ({} for the baseline);
    `samples` its objective samples (see study.objective; empty when it failed);
    `feasible` is False for failed outcomes and for a config with an SLO violated (its interval
    wholly outside the limit; an unproven one stays feasible); `running` is True for a
    trial still running on a slot (pending: no outcome or samples yet); `trial` is the store's
    record it was scored from (None for a hand-made view), for a strategy that needs more than
    the score.
    """

    params: Mapping[str, Any]
    outcome: Outcome = Outcome.ok
    samples: tuple[float, ...] = ()
    feasible: bool = True
    running: bool = False
    trial: Trial | None = None

    @property
    def usable(self) -> bool:
        """Ran, met the SLOs and has samples to compare."""
        return not self.running and self.outcome is Outcome.ok and self.feasible and bool(self.samples)


@dataclass(frozen=True)
class Proposal:
    """The next parameter values to try (names as in the study's space) and why."""

    params: dict[str, Any]
    reason: str = ""


class Strategy(Protocol):
    name: ClassVar[str]

    def propose(self, history: Sequence[TrialView]) -> Proposal | None:
        """The next untried, constraint-respecting candidate, or None when finished."""
        ...


@dataclass
class Tried:
    """The history grouped by Config: trials of one Config (the baseline's re-measurements,
    finalists' re-validations) pool their samples."""

    study: StudySpec
    by_key: dict[str, list[TrialView]] = field(default_factory=dict)

    @classmethod
    def of(cls, study: StudySpec, history: Sequence[TrialView]) -> Tried:
        tried = cls(study)
        for trial in history:
            tried.by_key.setdefault(study.config_for(dict(trial.params)).key(), []).append(trial)
        return tried

    def __contains__(self, config: Config) -> bool:
        """Tried or being tried: either way not to be handed out again."""
        return config.key() in self.by_key

    def running(self, config: Config) -> bool:
        """A trial of `config` is still running: what it measures is not known yet."""
        return any(t.running for t in self.by_key.get(config.key(), []))

    def samples(self, config: Config) -> list[float]:
        """Pooled samples of every usable trial of `config`."""
        return [x for t in self.by_key.get(config.key(), []) if t.usable for x in t.samples]

    def usable(self, config: Config) -> bool:
        """Every trial of the config ran and met the SLOs, and there are samples."""
        trials = [t for t in self.by_key.get(config.key(), []) if not t.running]
        return (bool(trials) and all(t.outcome is Outcome.ok and t.feasible for t in trials)
                and bool(self.samples(config)))

    def mean(self, config: Config) -> float | None:
        xs = self.samples(config)
        return fmean(xs) if xs else None


class SearchBase:
    """Helpers for strategies: configs from params, constraint checks, enumeration of values."""

    name: ClassVar[str] = ""
    # ofat and grid walk every value of every parameter: each must be enumerable.
    enumerates: ClassVar[bool] = False

    def __init__(self, study: StudySpec):
        self.study = study
        self.baseline = study.baseline_config()

    def check(self) -> None:
        """ServetuneError when the study's space does not suit this strategy."""
        if self.enumerates:
            for name in self.study.space:
                self.values(name)

    def config(self, params: Mapping[str, Any]) -> Config:
        return self.study.config_for(dict(params))

    def allowed(self, config: Config) -> bool:
        return not self.study.constraint_violations(config)

    def values(self, name: str) -> tuple[Any, ...]:
        return self.study.space[name].enumerate(name)

    def baseline_params(self) -> dict[str, Any]:
        """The baseline's value of every space parameter it sets explicitly."""
        return {n: v for n in self.study.space if (v := config_value(self.baseline, n)) is not None}

    def candidates(self, params: Iterator[dict[str, Any]], tried: Tried) -> Iterator[tuple[dict[str, Any], Config]]:
        """The untried, allowed configs among `params`, in order."""
        for p in params:
            config = self.config(p)
            if config not in tried and self.allowed(config):
                yield p, config
