"""The study's `strategy:` picks the strategy, from those registered by name as engines are (a new
strategy is one class plus one decorator); `baseline` proposes nothing."""

from __future__ import annotations

import pytest
from search_synthetic import make_study

from servetune.errors import ServetuneError
from servetune.search import (
    STRATEGIES,
    BaselineOnly,
    Grid,
    OneFactorAtATime,
    OptunaTPE,
    TrialView,
    make_strategy,
    register_strategy,
    registry,
)
from servetune.study import parse_study


@pytest.mark.parametrize(
    ("name", "cls"), [("baseline", BaselineOnly), ("ofat", OneFactorAtATime), ("grid", Grid), ("optuna", OptunaTPE)]
)
def test_make_strategy(name: str, cls: type) -> None:
    assert STRATEGIES[name] is cls
    assert type(make_strategy(make_study({"max-num-seqs": [4, 8]}, strategy=name))) is cls


@pytest.fixture
def strategies(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The registry as it is, restored after the test (a toy strategy must not leak into others)."""
    table = dict(registry.STRATEGIES)
    monkeypatch.setattr(registry, "STRATEGIES", table)
    return table


def test_an_unknown_strategy_is_refused_when_the_study_is_read() -> None:
    study = "name: s\nengine: {model: models/tiny}\nscenarios: [{name: s, input_len: 8, output_len: 8}]\nstrategy: bayes\n"
    with pytest.raises(ServetuneError, match="s.yaml:4: strategy: unknown strategy 'bayes'; known: baseline, grid, ofat, optuna"):
        parse_study(study, "s.yaml")


def test_an_unknown_strategy_built_in_code_is_refused_where_it_is_made() -> None:
    study = make_study({"max-num-seqs": [4, 8]}, strategy="bayes")   # no registry names given: not checked here
    with pytest.raises(ServetuneError, match="strategy: unknown strategy 'bayes'; known: baseline, grid, ofat, optuna"):
        make_strategy(study)


def test_a_registered_strategy_is_a_study_files_choice(strategies: dict) -> None:
    @register_strategy
    class Reversed(Grid):
        name = "reversed-grid"

    assert strategies["reversed-grid"] is Reversed
    assert type(make_strategy(make_study({"max-num-seqs": [4, 8]}, strategy="reversed-grid"))) is Reversed


def test_baseline_proposes_nothing() -> None:
    strategy = make_strategy(make_study({"max-num-seqs": [4, 8]}, strategy="baseline"))
    assert strategy.propose([]) is None
    assert strategy.propose([TrialView({}, samples=(1.0, 1.0))]) is None


@pytest.mark.parametrize("name", ["ofat", "grid", "optuna"])
def test_empty_space_finishes_at_once(name: str) -> None:
    assert make_strategy(make_study({}, strategy=name)).propose([TrialView({}, samples=(1.0,))]) is None
