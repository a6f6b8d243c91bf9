"""A trace replayed end to end against the FAKE streaming server (self-stamping, with a prefix
cache counted as vLLM counts it): the schedule is the trace's, prompts are exact, the measured
hit rate is the implied one; session turns wait for their answers; bench, capacity and the
trace command through the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.load.records import RequestRecord
from servetune.load.scenario import Scenario
from servetune.load.trace.formats import read_trace
from servetune.load.trace.spec import TraceSpec
from tests.fakes.launch import fake_server
from tests.unit.cli_run import servetune

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
MOONCAKE = REPO / "tests" / "fixtures" / "traces" / "mooncake-excerpt.jsonl"
TINY = REPO / "models" / "tiny"


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with fake_server(ttft_ms=1, itl_ms=1, prefix_cache_block=16) as url:
        yield url


def _records(path: str | None) -> list[RequestRecord]:
    assert path is not None
    return [RequestRecord.model_validate_json(x) for x in Path(path).read_text().splitlines()]


def test_a_mooncake_window_replays_on_schedule_with_exact_prompts_and_its_prefix_reuse(
        fake_url: str, tmp_path: Path) -> None:
    spec = TraceSpec(path=MOONCAKE, start_s=3, duration_s=40, token_scale=1 / 32, speedup=8)
    result = run_scenario(fake_url, None, Scenario(name="moon", trace=spec), RunOptions(tokenizer_dir=TINY, out_dir=tmp_path,
                          run_id="moon"))
    s = result.summary
    rows = [r for r in read_trace(MOONCAKE) if 3 <= r.t_s < 43]
    assert s["completed"] == len(rows) == s["trace_requests"] and s["failed"] == 0
    assert s["prompt_tokens_mismatched"] == 0 and s["prompt_tokens_checked"] == len(rows)
    assert s["output_tokens_mismatched"] == 0
    # the fake caches every block as its request arrives and never evicts: the implied rate exactly
    assert s["prefix_hit_rate_implied"] > 0.02 and s["prefix_hit_rate_measured"] == s["prefix_hit_rate_implied"]
    measured = sorted((r for r in _records(result.records_path) if not r.warmup), key=lambda r: r.index)
    start = measured[0].scheduled_ns
    expected = [(row.t_s - rows[0].t_s) / 8 * 1e9 for row in rows]   # ns; the client keeps whole ns
    assert max(abs(r.scheduled_ns - start - e) for r, e in zip(measured, expected, strict=True)) <= 1
    assert [r.input_len for r in measured] == [max(round(row.input_len / 32), 1) for row in rows]
    assert s["send_lateness_max_ms"] >= s["send_lateness_p99_ms"] >= s["send_lateness_p50_ms"] >= 0


def test_a_session_turn_leaves_after_the_previous_answer_plus_its_think_time(fake_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "sessions.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 20, "output_length": 30, "session_id": "a"}\n'
                     '{"timestamp": 1, "input_length": 20, "output_length": 2}\n'
                     '{"timestamp": 2, "input_length": 40, "output_length": 2, "session_id": "a", "delay": 20}\n')
    result = run_scenario(fake_url, None, Scenario(name="s", warmups=0, trace=TraceSpec(path=trace)),
                          RunOptions(tokenizer_dir=TINY, out_dir=tmp_path, run_id="s"))
    first, other, second = sorted(_records(result.records_path), key=lambda r: r.index)
    assert first.end_ns is not None and second.scheduled_ns == first.end_ns + 20_000_000
    assert second.dispatch_ns >= second.scheduled_ns and other.scheduled_ns < second.scheduled_ns


def test_trace_command_summarizes_plots_and_cuts_a_window_that_replays_whole(tmp_path: Path) -> None:
    plot = tmp_path / "trace.png"
    res = servetune("trace", "summary", MOONCAKE, "--plot", plot, "--pick", "peak", "--duration-s", "30")
    assert res.code == 0, res.stderr
    assert "300" in res.stdout and "implied prefix-cache hit rate" in res.stdout and "peak window" in res.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"
    cut = tmp_path / "window.jsonl"
    res = servetune("trace", "cut", MOONCAKE, "--start-s", "20", "--duration-s", "30", "--out", cut)
    assert res.code == 0, res.stderr
    rows = list(read_trace(cut))
    expected = [r for r in read_trace(MOONCAKE) if 20 <= r.t_s < 50]
    assert [(r.input_len, r.hash_ids) for r in rows] == [(r.input_len, r.hash_ids) for r in expected]
    assert rows[0].t_s == expected[0].t_s - 20


def test_bench_replays_a_trace_and_prints_its_fidelity(fake_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = servetune("bench", "--url", fake_url, "--tokenizer", TINY, "--trace", MOONCAKE, "--trace-set", "duration_s=15",
                    "--trace-set", "token_scale=0.03125", "--speedup", "4", "--out", out)
    assert res.code == 0, res.stderr
    assert "trace replay fidelity" in res.stdout and "implied / measured" in res.stdout
    assert "KV pool unknown" in res.stdout   # a server servetune did not boot: no boot log
    doc = json.loads(out.read_text())
    assert doc["scenario"]["trace"]["speedup"] == 4 and doc["prompt_tokens_mismatched"] == 0
    assert doc["prefix_hit_rate_measured"] == doc["prefix_hit_rate_implied"] and "prefix_hit_rate_pool" not in doc


def test_bench_says_which_trace_setting_is_wrong(tmp_path: Path) -> None:
    res = servetune("bench", "--url", "http://127.0.0.1:9", "--trace", MOONCAKE, "--trace-set", "speed=2",
                    "--out", tmp_path / "x.json")
    assert res.code == 2 and "--trace-set 'speed=2': expected KEY=VALUE with KEY one of format" in res.stderr
    res = servetune("bench", "--url", "http://127.0.0.1:9", "--trace", MOONCAKE, "--speedup", "0",
                    "--out", tmp_path / "x.json")
    assert res.code == 2 and "--speedup: Input should be greater than 0" in res.stderr


def test_capacity_searches_the_speedup_of_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    with fake_server(ttft_ms=20, itl_ms=1, slots=2) as url:
        res = servetune("capacity", "--url", url, "--tokenizer", TINY, "--trace", MOONCAKE, "--trace-set",
                        "token_scale=0.03125", "--slo", "ttft:p50=400", "--start", "2", "--max-levels", "3",
                        "--max-runs-per-level", "1", "--out", out)
    assert res.code == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["load"] == "speedup" and "x the recorded traffic" in res.stdout
    levels = [lv["level"] for lv in doc["levels"]]
    assert levels[0] == 2 and len(levels) >= 2
