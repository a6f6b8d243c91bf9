"""When a search may stop: the chance that a config not yet booted beats the leader.

The search ends once, for every allowed config of the space that no trial has booted yet, the
chance that its objective beats the leader's (the best measured usable config) by the study's
minimum effect is below `stopping.chance_below`. One model serves every strategy, and it is the
one OFAT's design rests on: **main effects**. On the log of the objective (a ratio to the
baseline, higher is better) each parameter value adds its own effect, the baseline's values
adding none:

    log y(config) = sum over parameters p of beta[p, value of p] + interaction and noise

Each effect has a Gaussian prior N(0, tau^2) and the measured configs' log means are its data
(each with its measurement variance: the pooled replicate variance over its sample count), so the
posterior is the conjugate Gaussian one (Bayesian linear regression). An unbooted config's
predicted log objective is then Gaussian too, its variance the posterior's plus the interaction
variance plus the leader's own measurement variance, and its chance is
P(prediction > log leader + log(1 + min effect)). A config predicted to tie with the leader has
a chance below 1/2 (it must beat it by the minimum effect), the further below the better its
effects are measured.

- `tau`, how large a value's effect may be before it is measured, is the largest effect seen so
  far (the largest |log mean| of a measured config), never less than the minimum effect: a value
  no trial has booted may be as good as the best thing seen. A config carrying one beside the
  leader's other values has a chance near 1/2; one that puts it in place of the value the leader
  owes its lead to has the one-sd tail, 1 - Phi(1) = 16 %. So a threshold of at most 15 % (the
  study file refuses more) never stops a search before it has booted every value.
- The interaction variance is the mean squared residual of the measured configs around the
  fitted main effects: where parameters interact, the model says so by trusting itself less.

Per strategy, what the chance comes from and why:

- `ofat`: the per-factor effects its walk measures are exactly this model's data (each step
  changes one value from the incumbent), so the bound is the posterior of those effects
  combined. OFAT's own walk boots every value once, so the rule stops it early only where the
  values left cannot lift the leader (a factor whose measured values all lose, say).
- `grid` (a shuffled or Gray-code walk) and `random`-like orders: the same posterior over the
  configs measured so far.
- `optuna` (TPE): TPE's surrogate is a pair of Parzen densities over the parameters (where the
  good trials lie against where the rest lie); it ranks what to try next but says nothing of how
  large a config's objective is, so it cannot give the chance that a config beats the leader by
  the minimum effect. The main-effects posterior can, and TPE's history is its data.

The rule needs every parameter's values enumerable (a finite set) and at most `MAX_CONFIGS`
configs in all; another space is not judged and never stops by this rule (`plan` says so). It is
a pure function of the history and the study, so a resumed study judges exactly as the killed
one did.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ..errors import ServetuneError
from ..study.constraints import config_value
from ..study.spec import StudySpec
from .base import TrialView, Tried

_NORMAL = NormalDist()
MAX_CONFIGS = 20_000   # every config is predicted before each proposal: a larger space is not judged


@dataclass(frozen=True)
class StopState:
    """Where a study stands against its stopping rule."""

    threshold: float | None      # stopping.chance_below; None: no rule
    chance: float | None         # the largest chance over the unbooted configs; None: not judged
    leader: str | None           # the leading config's label
    best_unbooted: str | None    # the unbooted config with that chance
    unbooted: int                # allowed configs no trial has booted or is booting
    why_unjudged: str = ""       # why there is no chance (nothing measured, a continuous range, ...)

    @property
    def stops(self) -> bool:
        if self.threshold is None:
            return False
        if self.unbooted == 0 and self.leader is not None:
            return True   # nothing left to boot: the strategy ends by itself anyway
        return self.chance is not None and self.chance < self.threshold

    def line(self, min_effect_pct: float) -> str:
        """One line for `plan`, `status` and the tuner's log."""
        if self.threshold is None:
            return "stopping rule: none (the search runs until its strategy or budget ends it)"
        rule = (f"stopping rule: stop once no unbooted config has a {self.threshold * 100:g} % chance of beating the "
                f"leader by {min_effect_pct:g} % (main-effects posterior, search/stopping.py)")
        if self.chance is None:
            return f"{rule}; now: not judged ({self.why_unjudged})"
        where = f"leader {self.leader}, {self.unbooted} unbooted"
        if self.best_unbooted is not None:
            where += f"; most promising {self.best_unbooted} at {self.chance:.1%}"
        return f"{rule}; now: {where}{' → stop' if self.stops else ''}"


def assess(spec: StudySpec, history: Sequence[TrialView]) -> StopState:
    """The study's stopping state after `history` (module docstring)."""
    threshold = spec.stopping.chance_below
    tried = Tried.of(spec, history)
    baseline = spec.baseline_config()
    try:
        values = {name: list(param.enumerate(name)) for name, param in spec.space.items()}
    except ServetuneError as exc:
        return StopState(threshold, None, None, None, 0, why_unjudged=f"the space is not enumerable: {exc}")
    size = math.prod(len(v) for v in values.values())
    if size > MAX_CONFIGS:
        why = f"a space of {size:,} configs is more than the {MAX_CONFIGS:,} the rule enumerates"
        return StopState(threshold, None, None, None, 0, why_unjudged=why)
    base_values = {n: config_value(baseline, n) for n in spec.space}
    unbooted: list[dict[str, Any]] = []
    for combo in itertools.product(*values.values()):
        params = dict(zip(values, combo, strict=True))
        config = spec.config_for(params)
        if config not in tried and not spec.constraint_violations(config) and config.key() != baseline.key():
            unbooted.append(params)
    measured = _measured(spec, tried, base_values)
    if not measured:
        return StopState(threshold, None, None, None, len(unbooted), why_unjudged="no config measured yet")
    leader_key = max(measured, key=lambda k: measured[k].log_mean)
    leader = measured[leader_key]
    if not unbooted:
        return StopState(threshold, 0.0, leader.label, None, 0)
    if len(measured) < 2:
        return StopState(threshold, None, leader.label, None, len(unbooted),
                         why_unjudged="one config measured: no effect to scale the prior by")
    model = _MainEffects.fit(list(measured.values()), base_values, spec.min_effect_pct)
    bar = leader.log_mean + math.log1p(spec.min_effect_pct / 100)
    best = max(((model.chance_above(p, bar, leader.variance), p) for p in unbooted), key=lambda cp: cp[0])
    label = spec.config_for(best[1]).label(baseline)
    return StopState(threshold, best[0], leader.label, label, len(unbooted))


@dataclass(frozen=True)
class _Measured:
    label: str
    levels: dict[str, Any]      # the config's value of every space parameter (None: the engine's default)
    log_mean: float
    variance: float             # of log_mean: measurement noise only


def _measured(spec: StudySpec, tried: Tried, base_values: Mapping[str, Any]) -> dict[str, _Measured]:
    """Every usable config of the history with its log mean and that mean's variance (the
    replicate variance pooled over all configs, over the config's sample count)."""
    baseline = spec.baseline_config()
    logs: dict[str, list[float]] = {}
    levels: dict[str, dict[str, Any]] = {}
    labels: dict[str, str] = {}
    for key, views in tried.by_key.items():
        config = spec.config_for(dict(views[0].params))
        if not tried.usable(config):
            continue
        xs = [math.log(x) for x in tried.samples(config) if x > 0]
        if not xs:
            continue
        logs[key] = xs
        levels[key] = {n: config_value(config, n) for n in spec.space}
        labels[key] = "baseline" if key == baseline.key() else config.label(baseline)
    dev = [(x - float(np.mean(xs))) ** 2 for xs in logs.values() if len(xs) > 1 for x in xs]
    dof = sum(len(xs) - 1 for xs in logs.values() if len(xs) > 1)
    pooled = sum(dev) / dof if dof else 0.0
    return {k: _Measured(labels[k], levels[k], float(np.mean(xs)), pooled / len(xs)) for k, xs in logs.items()}


@dataclass(frozen=True)
class _MainEffects:
    columns: list[tuple[str, Any]]     # (parameter, value) per effect; the baseline's values have none
    mean: np.ndarray
    cov: np.ndarray
    interaction_var: float
    tau: float                         # the prior sd of one value's effect
    base_values: Mapping[str, Any]

    @classmethod
    def fit(cls, data: list[_Measured], base_values: Mapping[str, Any], min_effect_pct: float) -> _MainEffects:
        columns = sorted({(n, _hashable(v)) for m in data for n, v in m.levels.items()
                          if _hashable(v) != _hashable(base_values[n])}, key=repr)
        x = np.array([[1.0 if _hashable(m.levels[n]) == v else 0.0 for n, v in columns] for m in data])
        y = np.array([m.log_mean for m in data])
        noise = np.array([max(m.variance, 1e-12) for m in data])
        tau = max(max(abs(m.log_mean) for m in data), math.log1p(min_effect_pct / 100))
        # Conjugate Gaussian posterior of the effects: prior N(0, tau^2 I), data y ~ N(X b, diag(noise)).
        precision = np.eye(len(columns)) / tau**2 + (x.T / noise) @ x if columns else np.zeros((0, 0))
        cov = np.linalg.inv(precision) if columns else precision
        mean = cov @ (x.T / noise) @ y if columns else np.zeros(0)
        residuals = y - (x @ mean if columns else 0.0)
        interaction = float(np.mean(residuals**2)) if len(data) > 1 else 0.0
        return cls(columns, mean, cov, interaction, tau, base_values)

    def chance_above(self, params: Mapping[str, Any], bar: float, bar_variance: float = 0.0) -> float:
        """P(log objective of `params` > bar) under the posterior, the bar itself uncertain by
        `bar_variance` (the leader's measurement); a value no measured config holds gets the prior
        (its effect N(0, tau^2)), through the column it lacks."""
        row = np.array([1.0 if _hashable(params.get(n)) == v else 0.0 for n, v in self.columns])
        mean = float(row @ self.mean) if self.columns else 0.0
        var = float(row @ self.cov @ row) if self.columns else 0.0
        unseen = [n for n, v in params.items() if _hashable(v) != _hashable(self.base_values[n])
                  and (n, _hashable(v)) not in self.columns]
        var += len(unseen) * self.tau**2 + self.interaction_var + bar_variance
        if var <= 0:
            return 1.0 if mean > bar else 0.0
        return 1 - _NORMAL.cdf((bar - mean) / math.sqrt(var))


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


__all__ = ["StopState", "assess"]
