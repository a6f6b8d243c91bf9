"""A capacity study's report shows each level as it was judged: the table and the curves pool a
level's runs and leave a closed loop's first wave out, like the verdicts (a run summary's own
percentiles count that wave)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servetune.analysis import analysis, capacity_runs
from servetune.load.records import RunResult
from servetune.report import capacity as report_capacity
from servetune.report.context import build as build_report_data
from servetune.store import StudyStore, TrialRole
from servetune.study.spec import StudySpec
from servetune.vocabulary import Outcome
from tests.fakes.records import closed_loop_records

USERS = (40, 80)   # levels measured; 80 users violates by its steady TTFT


def _spec(tmp_path: Path) -> StudySpec:
    return StudySpec.model_validate({
        "name": "levels",
        "engine": {"command": [sys.executable, "-c", "pass"], "model": str(tmp_path / "m")},
        "scenarios": [{"name": "users", "input_len": 8, "output_len": 4, "concurrency": 40, "warmups": 0}],
        "objective": {"maximize": "capacity", "slo": {"p95_ttft_ms": 1000}},
        "capacity": {"num_prompts": 80},
        "strategy": "baseline", "replicates": 1,
    })


def _store(tmp_path: Path) -> StudyStore:
    store = StudyStore.in_dir(tmp_path / "study")
    spec = _spec(tmp_path)
    store.set_meta_json("spec", spec.model_dump(mode="json"))   # as the tuner stores it; the report reads it
    trial = store.begin_trial(TrialRole.baseline, spec.baseline_config(), {})
    store.record_boot(trial.id, healthy_at=trial.started_at + 1, boot_facts=None, mismatches=[], log_path=None)
    for replicate, users in enumerate(USERS, start=1):
        steady = 300.0 if users == USERS[0] else 1500.0
        records = closed_loop_records(tmp_path / "study" / f"users-{users}.jsonl", users, 3000.0, steady)
        # The run's vllm-bench field counts the first wave: 3000 ms, over the limit at both levels.
        summary = {capacity_runs.LEVEL_KEY: users, "load": "concurrency", "p95_ttft_ms": 3000.0, "completed": 3 * users}
        store.record_run(trial.id, replicate, RunResult(scenario="users", summary=summary,
                                                        records_path=str(records)), started_at=0, ended_at=1)
    store.record_run(trial.id, capacity_runs.CAPACITY_REPLICATE, RunResult(scenario="users", summary={
        "capacity": USERS[0], "capacity_low": USERS[0], "capacity_high": USERS[1], "load": "concurrency",
        "judgement": capacity_runs.JUDGEMENT}), started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)
    return store


def test_levels_and_curves_are_the_judged_values_without_the_first_wave(tmp_path: Path, monkeypatch) -> None:
    spec = _spec(tmp_path)
    store = _store(tmp_path)
    plotted = {}

    def capture(curves, metrics, limits, load_label):
        plotted.update(curves=curves, metrics=metrics)
        return None

    monkeypatch.setattr(report_capacity.plots, "latency_vs_load", capture)
    data = build_report_data(analysis.analyze(store, spec), store)
    assert data.capacity is not None
    (table,) = data.capacity.levels
    assert table.slos == ["ttft:p95<=1000ms"] and table.unit == "concurrent requests"
    rows = {r.level: r for r in table.rows}
    # 2 x users judged at each level (the wave left out); steady TTFTs 300 and 1500 ms
    assert [rows[u].judged for u in USERS] == [2 * u for u in USERS]
    assert rows[40].verdict == "meets" and rows[40].slos[0].startswith("300 [")
    assert rows[80].verdict == "violates" and rows[80].slos[0].startswith("1500 [")
    # goodput: every judged request under 1000 ms at 40 users, none at 80 (requests a second apart)
    assert rows[40].goodput.startswith("1.01 [") and rows[80].goodput.startswith("0 [0, ")
    (curve,) = plotted["curves"]["users"]
    (boot,) = curve.boots
    assert plotted["metrics"]["users"] == ["p95_ttft_ms", "p99_itl_ms"]
    assert [(p.level, p.values["p95_ttft_ms"]) for p in boot] == [(40, pytest.approx(300.0)), (80, pytest.approx(1500.0))]
    assert all(p.values["p99_itl_ms"] == pytest.approx(20.0) for p in boot)   # no SLO on it: its plain p99


def test_a_level_row_counts_its_failed_requests_among_the_judged_and_says_so(tmp_path: Path) -> None:
    """A failed request is judged (over every limit): the row counts it and how many failed."""
    import numpy as np

    from servetune.capacity.levels import LevelSample, judge_level
    from servetune.capacity.sequential import Looks
    from servetune.capacity.slo import parse_slo

    values = [np.array([np.inf]) if i % 10 == 0 else np.array([300.0]) for i in range(200)]
    level = judge_level(4.0, [LevelSample(4.0, {"ttft": values}, 200, 180, failed=20)],
                        [parse_slo("ttft:p95=1000")], Looks(0.05, 1, 3))
    row = report_capacity._level_row("default", 1, level, 0.95)
    assert (row.judged, row.failed, row.verdict) == (200, 20, "violates")
    assert row.slos[0].startswith("2000 [")   # 10 % failed: the p95 is a failed one, counted at twice the limit
