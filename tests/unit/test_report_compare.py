"""`servetune compare A B` on bench result JSONs (with per-request JSONL beside them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from report_study import _records
from typer.testing import CliRunner

from servetune.cli import app
from servetune.errors import ServetuneError
from servetune.load.metrics import summarize
from servetune.report.compare import compare_sides, load_side, markdown
from servetune.stats.types import Verdict


def _bench(out: Path, run_id: str, seed: int, ttft_ms: float, itl_ms: float, scenario: str = "chat") -> Path:
    """A result laid out as `servetune bench --out` writes it: <run_id>.json + <run_id>.requests.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    recs = _records(np.random.default_rng(seed), 64, ttft_ms=ttft_ms, itl_ms=itl_ms, out_len=16)
    jsonl = out / f"{run_id}.requests.jsonl"
    jsonl.write_text("".join(r.model_dump_json() + "\n" for r in recs))
    doc = {"backend": "servetune", **summarize(recs, (recs[-1].end_ns - recs[0].dispatch_ns) / 1e9),
           "scenario": {"name": scenario}, "records_path": str(jsonl)}
    (out / f"{run_id}.json").write_text(json.dumps(doc))
    return out / f"{run_id}.json"


def _row(rows, metric):
    return next(r for r in rows if r.metric == metric)


def test_single_runs_use_per_request_bootstrap(tmp_path: Path) -> None:
    a = load_side(_bench(tmp_path / "a", "run", 1, ttft_ms=60.0, itl_ms=8.0))
    b = load_side(_bench(tmp_path / "b", "run", 2, ttft_ms=30.0, itl_ms=8.0))
    rows = compare_sides(a, b)
    ttft = _row(rows, "mean_ttft_ms")
    assert ttft.verdict is Verdict.better and ttft.comparison.ci_high_pct < 0
    assert ttft.method.startswith("bootstrap over requests (64 vs 64)")
    assert ttft.a == pytest.approx(a.scenarios["chat"].summaries[0]["mean_ttft_ms"])
    thr = _row(rows, "output_throughput")
    assert thr.verdict is None and thr.comparison is None and thr.b > thr.a  # one run each: no CI possible


def test_identical_data_gives_no_difference(tmp_path: Path) -> None:
    path = _bench(tmp_path / "a", "run", 1, ttft_ms=60.0, itl_ms=8.0)
    rows = compare_sides(load_side(path), load_side(path))
    for r in rows:
        if r.comparison is not None:
            assert r.comparison.effect_pct == 0.0 and r.verdict is Verdict.no_difference


def test_replicates_use_welch_over_runs(tmp_path: Path) -> None:
    for i in range(3):
        _bench(tmp_path / "a", f"r{i}", 10 + i, ttft_ms=60.0, itl_ms=10.0)
        _bench(tmp_path / "b", f"r{i}", 20 + i, ttft_ms=60.0, itl_ms=6.0)
    rows = compare_sides(load_side(tmp_path / "a"), load_side(tmp_path / "b"))
    tpot = _row(rows, "mean_tpot_ms")
    assert tpot.method == "Welch over runs (3 vs 3)" and tpot.verdict is Verdict.better
    thr = _row(rows, "output_throughput")
    assert thr.verdict is Verdict.better and thr.comparison.effect_pct > 0
    md = markdown(rows, load_side(tmp_path / "a"), load_side(tmp_path / "b"))
    assert "| chat | mean_tpot_ms |" in md and "B better" in md


def test_no_common_scenario_is_a_clear_error(tmp_path: Path) -> None:
    a = load_side(_bench(tmp_path / "a", "run", 1, 60.0, 8.0, scenario="chat"))
    b = load_side(_bench(tmp_path / "b", "run", 1, 60.0, 8.0, scenario="burst"))
    with pytest.raises(ServetuneError, match="no scenario in common"):
        compare_sides(a, b)


def test_not_a_bench_result(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ServetuneError, match="x.json: no `vllm bench serve` metrics"):
        load_side(bad)


def test_cli_compare_writes_markdown(tmp_path: Path) -> None:
    a = _bench(tmp_path / "a", "run", 1, ttft_ms=60.0, itl_ms=8.0)
    b = _bench(tmp_path / "b", "run", 2, ttft_ms=30.0, itl_ms=8.0)
    md = tmp_path / "cmp.md"
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "-m", "p99_ttft_ms", "-m", "output_throughput",
                                      "--markdown", str(md)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "p99_ttft_ms" in result.output and "B better" in result.output
    text = md.read_text()
    assert "| chat | p99_ttft_ms |" in text and "| chat | output_throughput |" in text
