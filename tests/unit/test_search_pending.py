"""Strategies with trials still running on other slots: never the same config twice; OFAT waits
for its step; TPE samples away from running points (constant liar)."""

from __future__ import annotations

import random

from search_synthetic import make_study, measure

from servetune.search import Grid, OneFactorAtATime, OptunaTPE, TrialView

SPACE = {"a": [1, 2, 3], "c": [10, 20]}
ARGS = {"a": 1, "c": 10}


def _hand_out(strategy, study, slots: int) -> list[dict]:
    """Ask for a config for each of `slots` free slots without any finishing: what each gets."""
    rng = random.Random(0)
    history = [measure(study, {}, lambda c: 1.0, rng)]
    given = []
    for _ in range(slots):
        proposal = strategy.propose(history)
        if proposal is None:
            break
        given.append(proposal.params)
        history.append(TrialView(proposal.params, running=True))
    return given


def _keys(study, given: list[dict]) -> list[str]:
    return [study.config_for(p).key() for p in given]


def test_grid_hands_every_free_slot_a_different_config() -> None:
    study = make_study(SPACE, args=ARGS, strategy="grid")
    given = _hand_out(Grid(study), study, slots=4)
    assert len(given) == 4 and len(set(_keys(study, given))) == 4


def test_ofat_hands_out_the_step_then_waits_for_it() -> None:
    study = make_study(SPACE, args=ARGS, strategy="ofat")
    ofat = OneFactorAtATime(study)
    # a's two other values go to two slots; the third slot gets nothing until one of them ends,
    # since which `a` the walk keeps decides where `c` is tried from.
    assert _hand_out(ofat, study, slots=3) == [{"a": 2}, {"a": 3}]


def test_ofat_goes_on_once_the_step_is_measured() -> None:
    study = make_study(SPACE, args=ARGS, strategy="ofat")
    ofat = OneFactorAtATime(study)
    rng = random.Random(0)
    history = [measure(study, p, lambda c: 1.0, rng) for p in ({}, {"a": 2}, {"a": 3})]
    assert ofat.propose(history).params == {"c": 20}


def test_tpe_never_hands_out_a_running_config() -> None:
    study = make_study({"a": {"low": 1, "high": 64}, "c": [10, 20]}, args=ARGS, strategy="optuna")
    tpe = OptunaTPE(study, n_startup_trials=2)
    rng = random.Random(1)
    history = [measure(study, {}, lambda c: 1.0, rng)]
    for a in (8, 16, 32):
        history.append(measure(study, {"a": a, "c": 20}, lambda c: c.flags["a"] / 64, rng))
    given = []
    for _ in range(6):
        proposal = tpe.propose(history)
        given.append(proposal.params)
        history.append(TrialView(proposal.params, running=True))
    assert len(set(_keys(study, given))) == len(given)
