"""A synthetic tuning loop for strategy tests: a known objective function with noise stands in for
servers and load, so a test knows the right answer. Used by tests/unit/test_search_*.py."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from servetune.engine.config import Config
from servetune.search import Strategy, TrialView
from servetune.study import StudySpec
from servetune.vocabulary import Outcome

# A Config's true objective value, or the Outcome it fails with.
TrueValue = Callable[[Config], "float | Outcome"]


def make_study(space: dict[str, Any], *, args: dict[str, Any] | None = None, strategy: str = "ofat",
               constraints: list[Any] | None = None, seed: int = 0) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "synthetic",
            "engine": {"model": "models/tiny", "args": args or {}},
            "space": space,
            "constraints": constraints or [],
            "scenarios": [{"name": "s", "input_len": 8, "output_len": 8}],
            "strategy": strategy,
            "seed": seed,
        }
    )


def measure(study: StudySpec, params: dict[str, Any], truth: TrueValue, rng: random.Random, *,
            replicates: int = 3, noise: float = 0.01, feasible: Callable[[Config], bool] = lambda c: True) -> TrialView:
    """One trial: replicates of the true value relative to the baseline's, with relative noise."""
    config = study.config_for(params)
    value, reference = truth(config), truth(study.baseline_config())
    if isinstance(value, Outcome):
        return TrialView(params, outcome=value, feasible=False)
    assert not isinstance(reference, Outcome)
    samples = tuple(value / reference * (1 + rng.gauss(0, noise)) for _ in range(replicates))
    return TrialView(params, samples=samples, feasible=feasible(config))


def run(strategy: Strategy, study: StudySpec, truth: TrueValue, *, max_trials: int = 200, seed: int = 0,
        **measure_kw: Any) -> list[TrialView]:
    """Baseline first, then the strategy's proposals until it finishes or max_trials candidates ran."""
    rng = random.Random(seed)
    history = [measure(study, {}, truth, rng, **measure_kw)]
    for _ in range(max_trials):
        proposal = strategy.propose(history)
        if proposal is None:
            break
        history.append(measure(study, proposal.params, truth, rng, **measure_kw))
    return history


def flags_changed(configs: list[Config]) -> int:
    """How many flags/env values change, summed over consecutive configs."""
    return sum(len(b.diff(a)) for a, b in zip(configs, configs[1:]))
