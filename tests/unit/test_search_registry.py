"""The study's `strategy:` picks the strategy; `baseline` proposes nothing."""

from __future__ import annotations

import pytest
from search_synthetic import make_study

from servetune.search import STRATEGIES, BaselineOnly, Grid, OneFactorAtATime, OptunaTPE, TrialView, make_strategy


@pytest.mark.parametrize(
    ("name", "cls"), [("baseline", BaselineOnly), ("ofat", OneFactorAtATime), ("grid", Grid), ("optuna", OptunaTPE)]
)
def test_make_strategy(name: str, cls: type) -> None:
    assert STRATEGIES[name] is cls
    assert type(make_strategy(make_study({"max-num-seqs": [4, 8]}, strategy=name))) is cls


def test_baseline_proposes_nothing() -> None:
    strategy = make_strategy(make_study({"max-num-seqs": [4, 8]}, strategy="baseline"))
    assert strategy.propose([]) is None
    assert strategy.propose([TrialView({}, samples=(1.0, 1.0))]) is None


@pytest.mark.parametrize("name", ["ofat", "grid", "optuna"])
def test_empty_space_finishes_at_once(name: str) -> None:
    assert make_strategy(make_study({}, strategy=name)).propose([TrialView({}, samples=(1.0,))]) is None
