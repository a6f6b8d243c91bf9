"""Goodput: the requests per second that met every per-request SLO (their own TTFT, TPOT, E2EL),
with an interval; in run summaries, capacity levels and a study's objective and report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from servetune.analysis.analysis import REPORTED_METRICS
from servetune.capacity.http import sample_from_records
from servetune.capacity.levels import judge_level
from servetune.capacity.sequential import Looks
from servetune.capacity.slo import parse_slo, per_request_limits, slos_from_limits
from servetune.load import metrics
from servetune.stats.intervals import goodput_ci, share_ci
from servetune.study.objective import Objective
from servetune.study.spec import SpecError, StudySpec
from tests.fakes.records import request_record_json
from tests.unit.test_load_metrics import RECORDS, rec


def test_a_share_interval_covers_the_true_share_of_independent_requests() -> None:
    rng = np.random.default_rng(3)
    covered = sum(share_ci(rng.random(400) < 0.9, 0.95).contains(0.9) for _ in range(400))
    assert 0.93 <= covered / 400 <= 0.99


def test_good_requests_that_come_in_runs_get_a_wider_interval_than_scattered_ones() -> None:
    scattered = np.tile([True] * 9 + [False], 80)              # 10 % bad, spread evenly
    clustered = np.array([True] * 720 + [False] * 80)          # the same 10 %, all in one slow spell
    a, b = share_ci(scattered), share_ci(clustered)
    assert a.estimate == b.estimate == pytest.approx(0.9)
    assert (b.high - b.low) > 3 * (a.high - a.low)
    assert b.contains(0.9) and a.low > 0.85


def test_goodput_is_the_good_requests_per_second_and_its_interval_holds_it() -> None:
    good = np.array([True] * 270 + [False] * 30)
    ci = goodput_ci(good, seconds=30.0)
    assert ci.estimate == pytest.approx(9.0)          # 270 good in 30 s
    assert ci.low < 9.0 < ci.high <= 10.0             # never more than the 10 req/s sent
    assert math.isnan(goodput_ci([], 10.0).estimate)


def test_a_run_summary_carries_goodput_with_its_interval() -> None:
    s = metrics.summarize([*RECORDS, rec(3, 0, [40])], duration_s=1.0, slo={"ttft": 150, "tpot": 12})
    assert s["request_goodput"] == pytest.approx(1.0)   # one of four requests met both
    assert s["goodput_share"] == pytest.approx(0.25)
    assert 0 <= s["request_goodput_low"] <= 1.0 <= s["request_goodput_high"] <= 4.0


def test_per_request_limits_are_the_tightest_slo_on_each_of_ttft_tpot_and_e2el() -> None:
    slos = [parse_slo("ttft:p99=1000"), parse_slo("ttft:mean=400"), parse_slo("itl:p99=50"),
            parse_slo("e2el:p90=5000")]
    assert per_request_limits(slos) == {"ttft": 400.0, "e2el": 5000.0}   # ITL: many gaps a request
    assert per_request_limits(slos_from_limits({"output_throughput": 10})) == {}


def test_a_capacity_level_reports_its_goodput_from_its_runs_records(tmp_path: Path) -> None:
    # 40 requests a second apart, TTFT 100 ms for the first 30 and 900 ms for the last 10
    path = tmp_path / "level.requests.jsonl"
    path.write_text("\n".join(request_record_json(i, 100.0 if i < 30 else 900.0) for i in range(40)) + "\n")
    slos = [parse_slo("ttft:p90=500")]
    sample = sample_from_records(1.0, path, slos=slos)
    assert sample.good is not None and int(sample.good.sum()) == 30
    level = judge_level(1.0, [sample, sample], slos, Looks(0.05, 1, 2))
    ci = level.goodput(0.95)
    assert ci is not None and ci.n == 80
    assert ci.estimate == pytest.approx(60 / (2 * sample.seconds))
    assert ci.low < ci.estimate < ci.high
    # without SLOs to count by, no goodput
    assert judge_level(1.0, [sample_from_records(1.0, path)], slos, Looks(0.05, 1, 1)).goodput(0.95) is None


def test_the_capacity_result_holds_each_levels_goodput(tmp_path: Path) -> None:
    from servetune.capacity.document import capacity_document
    from servetune.capacity.estimate import estimate
    from servetune.capacity.search import SearchResult, SearchSettings

    path = tmp_path / "level.requests.jsonl"
    path.write_text("\n".join(request_record_json(i, 100.0) for i in range(20)) + "\n")
    slos = [parse_slo("ttft:p50=500")]
    level = judge_level(1.0, [sample_from_records(1.0, path, slos=slos)], slos, Looks(0.05, 1, 1))
    result = SearchResult(levels=[level])
    doc = capacity_document(result, estimate(result.levels), slos, SearchSettings(1, 0.1, 10), "rate", {})
    (lv,) = json.loads(json.dumps(doc))["levels"]
    assert lv["goodput"]["requests"] == 20 and lv["goodput"]["req_per_s"] == pytest.approx(20 / level.samples[0].seconds)


def _spec(**objective: object) -> StudySpec:
    return StudySpec.model_validate({
        "name": "g", "engine": {"command": [sys.executable, "-c", "pass"], "model": "/m"},
        "scenarios": [{"name": "chat", "input_len": 8, "output_len": 4, "rate": 4}],
        "objective": objective, "strategy": "baseline"})


def test_goodput_is_an_objective_that_needs_a_per_request_slo() -> None:
    spec = _spec(maximize="request_goodput", slo={"p99_ttft_ms": 1000, "mean_tpot_ms": 50})
    objective = Objective(spec)
    assert objective.goodput_limits() == {"chat": {"ttft": 1000.0, "tpot": 50.0}}
    base = {"chat": [{"request_goodput": 4.0}, {"request_goodput": 4.0}]}
    assert objective.samples({"chat": [{"request_goodput": 5.0}]}, base) == [pytest.approx(1.25)]
    with pytest.raises(SpecError, match="request_goodput counts the requests that meet every per-request SLO"):
        _spec(maximize="request_goodput", slo={"output_throughput": 10})
    assert "request_goodput" in REPORTED_METRICS   # in every study's metrics, so in every report


def test_a_study_maximising_goodput_measures_it_in_every_run_and_reports_it(tmp_path: Path) -> None:
    """A whole study on the counting engine against the fake server: each run counts its goodput
    against the scenario's per-request limit, the analysis estimates it, the report shows it."""
    import io

    from rich.console import Console

    from servetune.engine.bootfacts import BootFacts
    from servetune.report.context import build as build_report_data
    from servetune.tune.display import StudyDisplay
    from servetune.tune.runner import StudyRunner
    from tests.fakes import MODEL_WITHOUT_WEIGHTS
    from tests.fakes.counting_engine import CountingEngine
    from tests.fakes.launch import fake_server

    spec = StudySpec.model_validate({
        "name": "goodput", "engine": {"command": [sys.executable], "model": str(MODEL_WITHOUT_WEIGHTS)},
        "space": {"max-num-seqs": [4]},
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 8, "warmups": 0}],
        "objective": {"maximize": "request_goodput", "slo": {"p99_ttft_ms": 5000}},
        "strategy": "grid", "replicates": 1, "finalists": 0,
    })
    with fake_server(ttft_ms=1, itl_ms=1) as url:
        runner = StudyRunner(spec, tmp_path / "study", display=StudyDisplay(Console(file=io.StringIO()),
                                                                             enabled=False))
        runner.engine = runner.executor.engine = CountingEngine(url, facts_for=lambda config: BootFacts())
        analysis = runner.run()
    runs = [r for t in runner.store.trials() for r in t.runs]
    assert len(runs) == 2
    for r in runs:   # every request well under 5 s: goodput is the request throughput
        assert r.summary["request_goodput"] == pytest.approx(r.summary["request_throughput"])
        assert r.summary["request_goodput_low"] < r.summary["request_goodput"] <= r.summary["request_goodput_high"]
    assert analysis.objective_metric == "request_goodput"
    assert all("request_goodput" in c.scenarios["s"].metrics for c in analysis.configs)
    rows = build_report_data(analysis, runner.store).metric_rows
    assert any(row.metric == "request_goodput" and row.kind == "objective" for row in rows)
