"""A capacity study's time estimate: its trial is a search of load levels per scenario, so one
more trial costs what the finished trials' searches took, not one replicate of a level."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from servetune.analysis import eta
from servetune.study.spec import StudySpec

BOOT_S, LEVEL_S = 50.0, 10.0


def _spec(tmp_path: Path, capacity: bool) -> StudySpec:
    data: dict[str, Any] = {
        "name": "eta",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(tmp_path / "m")},
        "scenarios": [{"name": "chat", "input_len": 8, "output_len": 4, "rate": 10, "concurrency": None, "warmups": 0}],
        "strategy": "baseline", "replicates": 2, "finalists": 0,
    }
    if capacity:
        data["objective"] = {"maximize": "capacity", "slo": {"mean_ttft_ms": 100}}
        data["capacity"] = {"num_prompts": 40, "max_levels": 6}
    return StudySpec.model_validate(data)


def _trial(trial_id: int, done: bool) -> Any:
    return SimpleNamespace(id=trial_id, done=done, boot_s=BOOT_S)


def _runs(trial_id: int, levels: int) -> list[Any]:
    """`levels` level runs of LEVEL_S each, then the derived capacity run (no time of its own)."""
    runs = [SimpleNamespace(trial_id=trial_id, scenario="chat", started_at=i * LEVEL_S, ended_at=(i + 1) * LEVEL_S)
            for i in range(levels)]
    runs.append(SimpleNamespace(trial_id=trial_id, scenario="chat", started_at=levels * LEVEL_S,
                                ended_at=levels * LEVEL_S))
    for run in runs:
        run.wall_s = run.ended_at - run.started_at
    return runs


def test_a_capacity_trial_costs_its_finished_searches(tmp_path: Path) -> None:
    spec = _spec(tmp_path, capacity=True)
    trials = [_trial(1, True), _trial(2, True), _trial(3, False)]
    runs = _runs(1, 8) + _runs(2, 6) + _runs(3, 2)  # trial 3 is still searching: not a whole search
    estimate = eta.for_study(spec, trials, runs, seed=None)
    assert eta.next_trial_s(spec, estimate) == pytest.approx(BOOT_S + 7 * LEVEL_S)  # median of 80 s and 60 s
    # Counted per run, as a fixed-load study is, the same store would promise one level a scenario.
    per_run = eta.estimate(trials, runs, seed=None)
    assert per_run.trial_s(spec.scenario_names, 1) == pytest.approx(BOOT_S + LEVEL_S)


def test_before_any_search_finished_a_capacity_trial_counts_its_allowed_levels(tmp_path: Path) -> None:
    spec = _spec(tmp_path, capacity=True)
    estimate = eta.for_study(spec, [_trial(1, False)], _runs(1, 3)[:-1], seed=None)
    assert eta.runs_per_scenario(spec) == pytest.approx(eta.CAPACITY_RUNS_PER_MAX_LEVEL * 6)
    assert eta.next_trial_s(spec, estimate) == pytest.approx(BOOT_S + eta.CAPACITY_RUNS_PER_MAX_LEVEL * 6 * LEVEL_S)


def test_a_fixed_load_study_still_counts_replicates(tmp_path: Path) -> None:
    spec = _spec(tmp_path, capacity=False)
    trials = [_trial(1, True)]
    runs = [r for r in _runs(1, 2) if r.wall_s > 0]  # its two replicates
    assert eta.runs_per_scenario(spec) == 2.0
    assert eta.next_trial_s(spec, eta.for_study(spec, trials, runs, seed=None)) == pytest.approx(BOOT_S + 2 * LEVEL_S)
