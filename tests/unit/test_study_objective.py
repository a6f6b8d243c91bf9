"""Objective samples (normalised gains over scenarios) and SLO checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.errors import ServetuneError
from servetune.study import Objective, parse_study

TEXT = (Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml").read_text()


def _objective(objective_yaml: str) -> Objective:
    head, _, _ = TEXT.partition("objective:")
    _, _, tail = TEXT.partition("strategy:")
    return Objective(parse_study(head + objective_yaml + "strategy:" + tail))


def _runs(metric: str, **values: list[float]) -> dict[str, list[dict[str, float]]]:
    return {s.replace("_", "-"): [{metric: v} for v in vs] for s, vs in values.items()}


BASE = _runs("output_throughput", single_decode=[90.0, 100.0, 110.0], burst=[380.0, 400.0, 420.0])


def test_weighted_gain() -> None:
    obj = _objective("objective:\n  maximize: output_throughput\n  weights: {single-decode: 1, burst: 3}\n")
    cand = _runs("output_throughput", single_decode=[120.0, 100.0], burst=[400.0, 440.0])
    # single-decode gains 1.2, 1.0 (baseline mean 100); burst 1.0, 1.1 (mean 400)
    assert obj.samples(cand, BASE) == pytest.approx([(1.2 + 3 * 1.0) / 4, (1.0 + 3 * 1.1) / 4])


def test_worst_case_gain() -> None:
    obj = _objective("objective:\n  maximize: output_throughput\n  combine: worst_case\n")
    cand = _runs("output_throughput", single_decode=[120.0, 100.0], burst=[400.0, 360.0])
    assert obj.samples(cand, BASE) == pytest.approx([1.0, 0.9])


def test_minimize_inverts_so_higher_is_better() -> None:
    obj = _objective("objective:\n  minimize: mean_ttft_ms\n")
    base = _runs("mean_ttft_ms", single_decode=[10.0, 10.0], burst=[40.0, 40.0])
    cand = _runs("mean_ttft_ms", single_decode=[5.0], burst=[40.0])
    assert obj.samples(cand, base) == pytest.approx([(2.0 + 1.0) / 2])


def test_baseline_scores_about_one_against_itself() -> None:
    obj = _objective("objective:\n  maximize: output_throughput\n")
    samples = obj.samples(BASE, BASE)
    assert len(samples) == 3
    assert sum(samples) / 3 == pytest.approx(1.0)
    assert samples == pytest.approx([0.925, 1.0, 1.075])


def test_zero_weight_leaves_a_scenario_out_and_missing_runs_give_no_samples() -> None:
    obj = _objective("objective:\n  maximize: output_throughput\n  weights: {single-decode: 0}\n")
    assert obj.scored_scenarios == ["burst"]
    assert obj.samples(_runs("output_throughput", burst=[440.0]), BASE) == pytest.approx([1.1])
    both = _objective("objective:\n  maximize: output_throughput\n")
    assert both.samples(_runs("output_throughput", burst=[440.0]), BASE) == []


def test_unusable_summaries_raise() -> None:
    obj = _objective("objective:\n  maximize: output_throughput\n")
    with pytest.raises(ServetuneError, match="no output_throughput"):
        obj.samples({"single-decode": [{}], "burst": [{"output_throughput": 1.0}]}, BASE)
    with pytest.raises(ServetuneError, match="no baseline run"):
        obj.samples(BASE, {"burst": BASE["burst"]})


def test_slo_directions_and_per_scenario_limits() -> None:
    obj = _objective(
        "objective:\n  maximize: output_throughput\n"
        "  slo: {p99_ttft_ms: 1000, output_throughput: 50, burst: {p99_ttft_ms: 3000, mean_tpot_ms: 20}}\n"
    )
    assert obj.slo["single-decode"] == {"p99_ttft_ms": 1000, "output_throughput": 50}
    assert obj.slo["burst"] == {"p99_ttft_ms": 3000, "output_throughput": 50, "mean_tpot_ms": 20}
    fine = {"p99_ttft_ms": 900.0, "output_throughput": 60.0, "mean_tpot_ms": 10.0}
    assert obj.slo_violations("single-decode", fine) == []
    slow = {"p99_ttft_ms": 2000.0, "output_throughput": 40.0}
    assert obj.slo_violations("single-decode", slow) == [
        "single-decode: p99_ttft_ms=2000 > 1000",
        "single-decode: output_throughput=40 < 50",
    ]
    assert obj.slo_violations("burst", slow) == ["burst: output_throughput=40 < 50", "burst: mean_tpot_ms is missing"]
