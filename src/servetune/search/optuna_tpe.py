"""`optuna`: Optuna's TPE sampler over the Space, with failures and SLO breaches as constraints.

On every call an in-memory Optuna study is rebuilt from the history (`create_trial` +
`add_trial`), and the sampler's seed is derived from the study seed and the history length:
the same history always gives the same proposal, so a resumed study continues exactly.

- Objective value of a trial: the mean of its objective samples (maximised).
- Feasibility goes to TPE as a constraint value (> 0 infeasible): a failed outcome
  (oom, invalid_arg, ...) is 2, an SLO violated 1 (its interval wholly outside the limit,
  analysis/slo_proof.py; an unproven SLO is feasible, as more boots may prove it), so the sampler
  learns to avoid both. A `duplicate` (it runs as a config already measured) is not a failure
  and is left out.
- A sample that breaks a constraint between parameters is told to the sampler as infeasible
  and sampled again; a sample that repeats a tried config is dropped and sampled again.
- Trials still running on other slots are added as RUNNING, and TPE runs with
  `constant_liar=True`: it treats them as (pessimistic) results, so free slots are handed
  different regions of the space, not the same promising point (Optuna's answer to parallel
  ask/tell); a sample that repeats a running config is dropped like a tried one.
- A candidate that racing stopped as clearly worse (tune/racing.py) is told as PRUNED, with its
  running mean after each replicate as the intermediate values, as a trial an Optuna pruner
  stopped: TPE ranks pruned trials below every complete one, by their last intermediate value.
- After `max_asks` samples without an untried allowed config: the first untried allowed
  one-parameter neighbour of the best trial (or the baseline), then the first untried allowed
  config in grid order; None when there is none (the space is exhausted).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from ..study.spec import StudySpec
from ..vocabulary import Outcome
from .base import Proposal, SearchBase, TrialView, Tried
from .grid import Grid
from .registry import register_strategy

_FAILED = 2.0
_SLO_BREACH = 1.0
_BROKEN_RULE = 1.0
_CONSTRAINT = "servetune"


@register_strategy
class OptunaTPE(SearchBase):
    name = "optuna"

    def __init__(self, study: StudySpec, *, max_asks: int = 64, n_startup_trials: int = 8):
        super().__init__(study)
        self.max_asks = max_asks
        self.n_startup_trials = n_startup_trials
        self.distributions: dict[str, BaseDistribution] = {n: p.distribution() for n, p in study.space.items()}

    def propose(self, history: Sequence[TrialView]) -> Proposal | None:
        if not self.study.space:
            return None
        tried = Tried.of(self.study, history)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            found = self._ask(history, tried)
        if found is not None:
            return found
        for params, config in self.candidates(self._fallbacks(history), tried):
            return Proposal(params, reason=f"optuna: fallback {config.label(self.baseline)}")
        return None

    def _ask(self, history: Sequence[TrialView], tried: Tried) -> Proposal | None:
        sampler = TPESampler(
            seed=(self.study.seed * 1_000_003 + len(history)) % 2**32,
            n_startup_trials=self.n_startup_trials,
            multivariate=True,
            constant_liar=True,
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for past in history:
            frozen = self._frozen(past)
            if frozen is not None:
                study.add_trial(frozen)
        rejected: set[str] = set()
        for _ in range(self.max_asks):
            trial = study.ask(self.distributions)
            params = dict(trial.params)
            config = self.config(params)
            if config in tried or config.key() in rejected:
                study.tell(trial, state=TrialState.FAIL)  # FAIL trials are invisible to TPE
                continue
            if not self.allowed(config):
                rejected.add(config.key())
                trial.set_constraint(_CONSTRAINT, _BROKEN_RULE)
                study.tell(trial, 0.0)
                continue
            return Proposal(params, reason=f"optuna: TPE sample {config.label(self.baseline)}")
        return None

    def _frozen(self, trial: TrialView) -> optuna.trial.FrozenTrial | None:
        """The trial as Optuna sees it, or None when its params are not a point of the Space
        (e.g. a baseline whose values lie outside the ranges)."""
        params = self._complete(trial.params)
        if params is None or trial.outcome is Outcome.duplicate:
            return None  # a duplicate ran as a measured config: that config's trial carries its value
        if trial.running:
            return create_trial(state=TrialState.RUNNING, params=params, distributions=self.distributions)
        if trial.outcome is not Outcome.ok or not trial.samples:
            violation, value = _FAILED, 0.0
        else:
            violation, value = (0.0 if trial.feasible else _SLO_BREACH), sum(trial.samples) / len(trial.samples)
        if trial.trial is not None and trial.trial.stopped_early is not None and trial.samples:
            steps = {i: sum(trial.samples[:i + 1]) / (i + 1) for i in range(len(trial.samples))}
            return create_trial(state=TrialState.PRUNED, params=params, distributions=self.distributions,
                                intermediate_values=steps, constraints={_CONSTRAINT: violation})
        return create_trial(
            value=value,
            params=params,
            distributions=self.distributions,
            constraints={_CONSTRAINT: violation},
        )

    def _complete(self, params: Any) -> dict[str, Any] | None:
        """Every space parameter's value: the trial's, else the baseline's explicit one."""
        full = {**self.baseline_params(), **dict(params)}
        if set(full) != set(self.study.space):
            return None
        if not all(self.study.space[n].contains(v) for n, v in full.items()):
            return None
        return full

    def _fallbacks(self, history: Sequence[TrialView]) -> Iterator[dict[str, Any]]:
        """One-parameter neighbours of the best usable trial (or the baseline), then the whole grid
        (parameters that cannot be enumerated are left out of both)."""
        enumerable = [n for n, p in self.study.space.items() if p.enumerable(n)]
        best = max((t for t in history if t.usable), key=lambda t: sum(t.samples) / len(t.samples), default=None)
        centre = dict(best.params) if best is not None else {}
        for name in enumerable:
            for value in self.values(name):
                yield {**centre, name: value}
        if len(enumerable) == len(self.study.space):
            yield from Grid(self.study).combinations()

