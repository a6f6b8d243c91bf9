"""run_scenario end to end against the FAKE streaming server (fast, no vLLM): scheduling,
workers, files, failure handling. Real-server behaviour is in tests/e2e/test_load_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.engine.ports import free_port
from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.load.records import RequestRecord
from servetune.load.scenario import Scenario
from servetune.vocabulary import Outcome
from tests.fakes.launch import fake_server


@pytest.fixture(scope="module")
def fake_url() -> str:
    with fake_server(ttft_ms=5, itl_ms=2, tokens_per_chunk=2) as url:
        yield url


@pytest.mark.parametrize("workers", [1, 2])
def test_open_loop_run_writes_vllm_fields_and_records(fake_url: str, tmp_path: Path, workers: int) -> None:
    sc = Scenario(name="fake", input_len=40, output_len=9, concurrency=None, rate=200.0, num_prompts=30, warmups=3)
    done: list[tuple[int, int]] = []
    r = run_scenario(fake_url, None, sc, RunOptions(tokenizer_dir=None, out_dir=tmp_path, run_id="r1", slo={"ttft": 10_000},
                     percentiles=(50, 99.9), progress=lambda d, n: done.append((d, n)), workers=workers))
    s = r.summary
    assert r.error is None and s["completed"] == 30 and s["failed"] == 0
    assert s["total_output_tokens"] == 30 * 9 and s["prompt_tokens_mismatched"] == 0
    assert s["request_goodput"] == s["request_throughput"]
    assert "p99.9_ttft_ms" in s and s["mean_itl_per_token_ms"] < s["mean_itl_ms"]  # 2 tokens a chunk
    assert done and done[-1] == (30, 30)
    assert r.client_health["workers"] == workers and r.client_health["requested_rate"] == 200.0
    doc = json.loads((tmp_path / "r1.json").read_text())
    assert doc["completed"] == 30 and len(doc["ttfts"]) == 30 and doc["request_rate"] == 200.0
    recs = [RequestRecord.model_validate_json(x) for x in Path(r.records_path or "").read_text().splitlines()]
    assert sum(x.warmup for x in recs) == 3 and len(recs) == 33
    measured = sorted((x for x in recs if not x.warmup), key=lambda x: x.scheduled_ns)
    assert [x.index for x in measured] == list(range(30))  # sent in schedule order
    assert all(x.dispatch_ns >= x.scheduled_ns for x in measured)


def test_a_run_without_details_leaves_the_per_request_arrays_to_the_jsonl(fake_url: str, tmp_path: Path) -> None:
    sc = Scenario(name="fake", input_len=40, output_len=9, concurrency=4, num_prompts=12, warmups=0)
    r = run_scenario(fake_url, None, sc, RunOptions(tokenizer_dir=None, out_dir=tmp_path, run_id="lean", detailed=False))
    doc = json.loads((tmp_path / "lean.json").read_text())
    assert doc["completed"] == 12 and doc["mean_itl_ms"] > 0 and doc["records_path"] == r.records_path
    assert not {"ttfts", "itls", "input_lens", "output_lens", "latencies", "start_times"} & doc.keys()
    assert len(Path(r.records_path or "").read_text().splitlines()) == 12


def test_duration_only_closed_loop_stops_sending_at_the_deadline(fake_url: str) -> None:
    sc = Scenario(name="dur", input_len=10, output_len=4, concurrency=4, num_prompts=None, duration_s=1.0)
    r = run_scenario(fake_url, None, sc, RunOptions(tokenizer_dir=None))
    s = r.summary
    assert s["completed"] > 20 and s["failed"] == 0
    assert 1.0 <= s["duration"] < 2.0


def test_failed_requests_are_counted_not_raised(fake_url: str, tmp_path: Path) -> None:
    ds = tmp_path / "prompts.jsonl"
    ds.write_text("\n".join(json.dumps({"prompt": p, "output_len": 6})
                            for p in ["t1 t2", "t3 FAIL", "t4 BREAK t5", "t6 t7"]) + "\n")
    sc = Scenario(name="mixed", dataset=ds, concurrency=2, num_prompts=4, warmups=0)
    r = run_scenario(fake_url, None, sc, RunOptions(tokenizer_dir=None))
    s = r.summary
    assert r.outcome is Outcome.ok and r.error is None
    assert s["completed"] == 2 and s["failed"] == 2
    assert any("HTTP 500" in e for e in s["errors"])
    assert s["total_input_tokens"] == (8 + 2) * 2  # nonce + the dataset prompt, from usage


def test_dead_server_is_an_error_in_the_result() -> None:
    sc = Scenario(name="dead", input_len=10, output_len=4, concurrency=2, num_prompts=4)
    dead = run_scenario(f"http://127.0.0.1:{free_port()}", "m", sc, RunOptions(tokenizer_dir=None))
    assert dead.outcome is Outcome.crashed and "unreachable" in (dead.error or "")
