"""optuna (TPE): learns from results and failures, never repeats, resumes exactly."""

from __future__ import annotations

import math
import random

from search_synthetic import make_study, run

from servetune.engine.config import Config
from servetune.search import OptunaTPE, Proposal, TrialView, make_strategy
from servetune.vocabulary import Outcome

SPACE = {"x": {"low": 0, "high": 40}, "y": {"low": 0, "high": 16}, "c": ["a", "b", "c"]}
ARGS = {"x": 0, "y": 0, "c": "a"}
BUDGET = 30


def peak(config: Config) -> float | Outcome:
    """One smooth peak at x=30, y=8, c=b; x > 36 runs out of memory."""
    f = config.flags
    if f["x"] > 36:
        return Outcome.oom
    return 1.0 + math.exp(-((f["x"] - 30) ** 2 + (f["y"] - 8) ** 2) / 60) * (1.5 if f["c"] == "b" else 1.0)


class RandomSearch:
    """The yardstick: uniformly random untried configs."""

    name = "random"

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def propose(self, history: list[TrialView]) -> Proposal:
        return Proposal({"x": self.rng.randint(0, 40), "y": self.rng.randint(0, 16), "c": self.rng.choice("abc")})


def _best(history: list[TrialView]) -> float:
    return max(sum(t.samples) / len(t.samples) for t in history if t.usable)


def test_improves_over_random_search_and_never_repeats() -> None:
    tpe_best, random_best = [], []
    for seed in range(4):
        study = make_study(SPACE, args=ARGS, strategy="optuna", seed=seed)
        history = run(make_strategy(study), study, peak, max_trials=BUDGET, seed=seed)
        keys = [study.config_for(t.params).key() for t in history]
        assert len(keys) == len(set(keys)) == 1 + BUDGET
        tpe_best.append(_best(history))
        random_best.append(_best(run(RandomSearch(seed), study, peak, max_trials=BUDGET, seed=seed)))
    print(f"best after {BUDGET} trials: TPE {sum(tpe_best) / 4:.3f}, random {sum(random_best) / 4:.3f}")
    assert sum(tpe_best) > sum(random_best)


def test_failures_are_learnt_from() -> None:
    """Configs with c=c or y > 12 fail (about half the space); over the last 20 of 40 trials TPE
    runs into them less than half as often as random search does."""

    def fragile(config: Config) -> float | Outcome:
        return Outcome.oom if config.flags["c"] == "c" or config.flags["y"] > 12 else peak(config)

    tpe_failures = random_failures = 0
    for seed in range(4):
        study = make_study(SPACE, args=ARGS, strategy="optuna", seed=seed)
        history = run(OptunaTPE(study), study, fragile, max_trials=40, seed=seed)
        tpe_failures += sum(t.outcome is Outcome.oom for t in history[-20:])
        baseline_walk = run(RandomSearch(seed), study, fragile, max_trials=40, seed=seed)
        random_failures += sum(t.outcome is Outcome.oom for t in baseline_walk[-20:])
    print(f"failed trials among the last 20 (4 seeds): TPE {tpe_failures}, random {random_failures}")
    assert tpe_failures < random_failures / 2


def test_constraints_between_parameters_hold() -> None:
    study = make_study(SPACE, args=ARGS, strategy="optuna", constraints=["y <= x", {"expr": "x <= 20", "when": {"c": "c"}}])
    history = run(OptunaTPE(study), study, peak, max_trials=25)
    assert len(history) == 26
    assert all(study.constraint_violations(study.config_for(t.params)) == [] for t in history)


def test_small_space_is_exhausted_then_finishes() -> None:
    study = make_study({"a": [1, 2], "b": [True, False]}, args={"a": 1, "b": True}, strategy="optuna")
    strategy = OptunaTPE(study)
    history = run(strategy, study, lambda c: 1.0 + c.flags["a"] / 10)
    assert len(history) == 4  # baseline + the three other combinations, each once
    assert strategy.propose(history) is None


def test_same_history_gives_the_same_proposal() -> None:
    study = make_study(SPACE, args=ARGS, strategy="optuna", seed=7)
    history = run(OptunaTPE(study), study, peak, max_trials=15, seed=3)
    for k in (1, 5, 12, len(history)):
        a = OptunaTPE(study).propose(history[:k])
        b = OptunaTPE(study).propose(list(history[:k]))
        assert a is not None and a == b
        if k < len(history):
            assert a.params == history[k].params


def test_float_ranges_work_without_enumeration() -> None:
    study = make_study({"gpu-memory-utilization": {"low": 0.5, "high": 0.95}}, strategy="optuna")
    history = run(make_strategy(study), study, lambda c: 1.0 + c.flags.get("gpu-memory-utilization", 0.5), max_trials=10)
    values = [t.params["gpu-memory-utilization"] for t in history[1:]]
    assert len(values) == 10 and all(0.5 <= v <= 0.95 for v in values)


def test_a_duplicate_is_not_told_to_tpe_as_a_failure() -> None:
    """A duplicate runs as a measured config (the runner's `duplicate` outcome): no constraint breach."""
    study = make_study(SPACE, args=ARGS, strategy="optuna")
    tpe = OptunaTPE(study)
    assert tpe._frozen(TrialView({"x": 3}, outcome=Outcome.duplicate)) is None
    failed = tpe._frozen(TrialView({"x": 3}, outcome=Outcome.skipped))  # known to fail: to be avoided
    assert failed is not None and failed.constraints == {"servetune": 2.0}
