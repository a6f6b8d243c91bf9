"""Adaptive replication: never before min_reps, always at max_reps, precise / clearly worse stops."""

from __future__ import annotations

import math

import pytest

from servetune.stats import replication_decision

BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def decide(cand, base=BASE, **kw):
    kw.setdefault("min_reps", 3)
    kw.setdefault("max_reps", 6)
    kw.setdefault("higher_is_better", True)
    return replication_decision(cand, base, **kw)


def test_never_stops_before_min_reps() -> None:
    for cand in ([], [50.0], [50.0, 50.1]):  # even if clearly worse or perfectly precise
        d = decide(cand)
        assert not d.stop and d.rule == "min_reps" and d.n == len(cand)


def test_stops_at_max_reps_even_when_noisy() -> None:
    d = decide([80.0, 120.0, 90.0, 115.0, 85.0, 110.0])
    assert d.stop and d.rule == "max_reps" and d.n == 6


def test_stops_when_precise() -> None:
    d = decide([100.0, 100.4, 99.8], target_rel_half_width=0.02)
    assert d.stop and d.rule == "precise" and d.rel_half_width <= 0.02


def test_continues_when_noisy_and_not_clearly_worse() -> None:
    d = decide([90.0, 110.0, 100.0], target_rel_half_width=0.02)
    assert not d.stop and d.rule == "continue" and d.rel_half_width > 0.02


def test_stops_when_clearly_worse_in_either_direction() -> None:
    d = decide([90.0, 91.0, 89.5])
    assert d.stop and d.rule == "worse"
    latency = decide([110.0, 111.0, 109.5], higher_is_better=False)
    assert latency.stop and latency.rule == "worse"
    # the same values are clearly *better* for a throughput: no futility stop then
    better = decide([110.0, 111.0, 90.0], target_rel_half_width=0.001)
    assert not better.stop


def test_worse_rule_uses_the_candidate_interval_not_just_its_mean() -> None:
    # mean 97 < baseline mean 100, but the spread is wide: the CI still reaches 100
    d = decide([90.0, 104.0, 97.0], target_rel_half_width=0.001)
    assert not d.stop and d.rule == "continue"


def test_without_baseline_only_precision_counts() -> None:
    d = replication_decision([50.0, 50.1, 49.9], min_reps=3, max_reps=5, higher_is_better=True)
    assert d.stop and d.rule == "precise"
    d = replication_decision([50.0, 60.0, 40.0], min_reps=3, max_reps=5, higher_is_better=True)
    assert not d.stop
    for empty in (None, []):
        d = replication_decision([50.0, 50.1, 49.9], empty, min_reps=3, max_reps=5, higher_is_better=True)
        assert d.stop and d.rule == "precise"


def test_zero_variance_and_single_replicate() -> None:
    d = replication_decision([7.0, 7.0, 7.0], min_reps=2, max_reps=5, higher_is_better=True)
    assert d.stop and d.rule == "precise" and d.rel_half_width == 0.0
    one = replication_decision([7.0], min_reps=1, max_reps=5, higher_is_better=True)
    assert not one.stop and one.rel_half_width == math.inf


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="min_reps"):
        decide([1.0, 2.0, 3.0], min_reps=4, max_reps=3)
    with pytest.raises(ValueError, match="candidate_values"):
        decide([1.0, float("nan"), 3.0])
