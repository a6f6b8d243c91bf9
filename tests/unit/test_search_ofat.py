"""ofat on a synthetic objective with known one-factor effects and 1 % noise."""

from __future__ import annotations

import random

from search_synthetic import make_study, measure, run

from servetune.engine.config import Config
from servetune.search import OneFactorAtATime, TrialView, Tried
from servetune.vocabulary import Outcome

SPACE = {"a": [1, 2, 3], "b": ["x", "y"], "c": [10, 20]}
ARGS = {"a": 1, "b": "x", "c": 10}


def truth(config: Config) -> float:
    """a=2 is +10 %, a=3 +3 %, b does nothing, c=20 is +5 %; effects multiply."""
    f = config.flags
    return {1: 1.0, 2: 1.10, 3: 1.03}[f["a"]] * (1.05 if f["c"] == 20 else 1.0)


def test_finds_the_known_one_factor_improvements() -> None:
    study = make_study(SPACE, args=ARGS)
    ofat = OneFactorAtATime(study)
    history = run(ofat, study, truth)
    proposed = [t.params for t in history[1:]]
    # every other value of each factor, from the incumbent, in order; the baseline's own values skipped
    assert proposed == [{"a": 2}, {"a": 3}, {"a": 2, "b": "y"}, {"a": 2, "c": 20}]
    assert ofat.incumbent(history) == {"a": 2, "c": 20}
    assert ofat.propose(history) is None


def test_never_keeps_a_change_that_only_noise_supports() -> None:
    study = make_study(SPACE, args=ARGS)
    ofat = OneFactorAtATime(study)
    history = run(ofat, study, lambda c: 1.0, noise=0.02)
    assert ofat.incumbent(history) == {}
    assert len(history) == 1 + 4  # a: 2 values, b: 1, c: 1, all from the baseline


def test_infeasible_and_failed_values_are_never_kept_or_retried() -> None:
    study = make_study(SPACE, args=ARGS)
    ofat = OneFactorAtATime(study)

    def truth_with_failure(config: Config) -> float | Outcome:
        return Outcome.oom if config.flags["c"] == 20 else truth(config) * (1.5 if config.flags["a"] == 3 else 1.0)

    history = run(ofat, study, truth_with_failure, feasible=lambda c: c.flags["a"] != 3)
    # a=3 is by far the fastest but breaks an SLO; c=20 fails outright
    assert ofat.incumbent(history) == {"a": 2}
    keys = [study.config_for(t.params).key() for t in history]
    assert len(keys) == len(set(keys))


def test_respects_constraints() -> None:
    study = make_study(SPACE, args=ARGS, constraints=["a < 3", {"expr": "a <= 1", "when": {"c": 20}}])
    ofat = OneFactorAtATime(study)
    history = run(ofat, study, truth)
    assert all(not study.constraint_violations(study.config_for(t.params)) for t in history)
    assert {"a": 3} not in [t.params for t in history]
    assert ofat.incumbent(history) == {"a": 2}  # c=20 with a=2 breaks the second rule


def test_resume_gives_the_same_proposal() -> None:
    study = make_study(SPACE, args=ARGS)
    history = run(OneFactorAtATime(study), study, truth)
    for k in range(1, len(history) + 1):
        first = OneFactorAtATime(study).propose(history[:k])
        again = OneFactorAtATime(study).propose(list(history[:k]))
        assert first == again
        if k < len(history):
            assert first is not None and first.params == history[k].params


def test_remeasured_baseline_pools_into_one_reference() -> None:
    """The baseline measured three times (interleaving) is one config with 9 samples."""
    study = make_study(SPACE, args=ARGS)
    rng = random.Random(1)
    base = [measure(study, {}, truth, rng) for _ in range(3)]
    history: list[TrialView] = [base[0], measure(study, {"a": 2}, truth, rng), base[1], measure(study, {"a": 3}, truth, rng), base[2]]
    assert len(Tried.of(study, history).samples(study.baseline_config())) == 9
    ofat = OneFactorAtATime(study)
    assert ofat.propose(history).params == {"a": 2, "b": "y"}  # type: ignore[union-attr]
