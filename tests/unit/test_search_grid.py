"""grid: every allowed combination once, in an order that changes few flags between boots."""

from __future__ import annotations

import itertools

import pytest
from search_synthetic import flags_changed, make_study, run

from servetune.errors import ServetuneError
from servetune.search import Grid, gray_order, make_strategy
from servetune.vocabulary import Outcome

SPACE = {"max-num-batched-tokens": [256, 1024, 4096], "max-num-seqs": [4, 16, 32], "enable-prefix-caching": [True, False], "env.X": ["a", "b"]}
RULE = {"expr": "max-num-batched-tokens >= max-model-len", "when": {"enable-prefix-caching": False}}


def test_gray_order_visits_each_index_once_changing_one_digit() -> None:
    radices = [3, 2, 4, 1, 3]
    order = list(gray_order(radices))
    assert sorted(order) == list(itertools.product(*(range(r) for r in radices)))
    assert all(sum(x != y for x, y in zip(a, b)) == 1 for a, b in zip(order, order[1:]))


def test_covers_every_allowed_combination_once_with_fewer_changes_than_nested_loops() -> None:
    study = make_study(SPACE, args={"max-model-len": 1024}, strategy="grid", constraints=[RULE])
    history = run(Grid(study), study, lambda c: 1.0)
    proposed = [study.config_for(t.params) for t in history[1:]]

    names = list(SPACE)
    naive = [study.config_for(dict(zip(names, vs))) for vs in itertools.product(*SPACE.values())]
    allowed = [c for c in naive if not study.constraint_violations(c)]
    assert len(allowed) < len(naive)  # the rule removes the 256-token combinations without prefix caching
    assert sorted(c.key() for c in proposed) == sorted(c.key() for c in allowed)
    assert flags_changed(proposed) < flags_changed(allowed)
    print(f"flags changed: gray {flags_changed(proposed)}, nested loops {flags_changed(allowed)}")


def test_skips_the_baseline_and_finishes() -> None:
    study = make_study({"max-num-seqs": [4, 32], "enable-prefix-caching": [True, False]},
                       args={"max-num-seqs": 32, "enable-prefix-caching": True}, strategy="grid")
    grid = Grid(study)
    history = run(grid, study, lambda c: 1.0)
    assert len(history) == 1 + 3  # the combination equal to the baseline is not measured twice
    assert grid.propose(history) is None


def test_failed_configs_are_not_retried_and_resume_is_exact() -> None:
    study = make_study(SPACE, strategy="grid")
    history = run(Grid(study), study, lambda c: Outcome.oom if c.flags.get("max-num-seqs") == 32 else 1.0)
    keys = [study.config_for(t.params).key() for t in history]
    assert len(keys) == len(set(keys)) == 1 + 3 * 3 * 2 * 2
    for k in range(1, len(history)):
        assert Grid(study).propose(history[:k]).params == history[k].params  # type: ignore[union-attr]


def test_continuous_parameter_is_refused_up_front() -> None:
    study = make_study({"gpu-memory-utilization": {"low": 0.5, "high": 0.9}}, strategy="grid")
    with pytest.raises(ServetuneError, match="space.gpu-memory-utilization: a float range needs a step"):
        make_strategy(study)
