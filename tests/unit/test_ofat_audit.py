"""The one-factor-at-a-time check the example e2e study uses, on stores written here: each
candidate must differ from the incumbent of its time (not the baseline) in exactly one parameter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servetune.analysis.ofat_audit import off_one_factor
from servetune.store import StudyStore
from servetune.study import parse_study
from tests.unit.test_tune_analysis import STUDY, _trial

TWO_FACTORS = STUDY.replace("space: {max-num-seqs: [4, 8, 16]}",
                            "space: {max-num-seqs: [4, 8], max-num-batched-tokens: [256, 512]}")


def _walk(tmp_path: Path, second_step: list[dict]) -> list[str]:
    """Baseline (max-num-seqs 4); max-num-seqs 8 clearly better, so the incumbent moves there;
    then the candidates of the second parameter as given."""
    spec = parse_study(TWO_FACTORS)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(2)
    _trial(store, spec, rng, "baseline", {}, 100)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 130)
    for params in second_step:
        _trial(store, spec, rng, "candidate", params, 120)
    return off_one_factor(store, spec)


def test_a_walk_from_the_moved_incumbent_is_one_factor_at_a_time(tmp_path: Path) -> None:
    # Two parameters away from the baseline, one from the incumbent of their time.
    assert _walk(tmp_path, [{"max-num-seqs": 8, "max-num-batched-tokens": 256},
                            {"max-num-seqs": 8, "max-num-batched-tokens": 512}]) == []


def test_a_candidate_that_moves_two_factors_is_named(tmp_path: Path) -> None:
    problems = _walk(tmp_path, [{"max-num-seqs": 4, "max-num-batched-tokens": 256}])
    assert len(problems) == 1 and problems[0].startswith("#3 ")
    assert "['max-num-batched-tokens', 'max-num-seqs']" in problems[0]


def test_a_candidate_that_ignores_the_moved_incumbent_is_named(tmp_path: Path) -> None:
    # One factor from the baseline, but the incumbent had moved to max-num-seqs 8 by then.
    problems = _walk(tmp_path, [{"max-num-batched-tokens": 256}])
    assert len(problems) == 1 and "#3 " in problems[0]
