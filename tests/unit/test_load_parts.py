"""Arrival schedules, length sampling, datasets, SSE parsing and the client self-check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from servetune.errors import ServetuneError
from servetune.load import arrivals, client, health
from servetune.load.dataset import read_dataset, request_specs, sample_lengths
from servetune.load.records import RequestRecord
from servetune.load.scenario import FromFile, Normal, Scenario, Uniform, preset


def test_open_loop_spans_n_over_rate_and_gamma_burstiness_changes_spread() -> None:
    rng = np.random.default_rng(0)
    off = arrivals.open_loop_offsets(1000, 10.0, 1.0, rng)
    assert off[-1] == pytest.approx(100.0) and np.all(np.diff(off) >= 0)
    poisson_cv = np.std(np.diff(off)) / np.mean(np.diff(off))
    smooth = arrivals.open_loop_offsets(1000, 10.0, 20.0, np.random.default_rng(0))
    bursty = arrivals.open_loop_offsets(1000, 10.0, 0.2, np.random.default_rng(0))
    cv = lambda o: np.std(np.diff(o)) / np.mean(np.diff(o))  # noqa: E731
    assert cv(smooth) < poisson_cv < cv(bursty)
    assert 0.8 < poisson_cv < 1.2  # exponential gaps have CV 1
    assert np.all(arrivals.open_loop_offsets(5, math.inf, 1.0, rng) == 0)


def test_plan_kinds() -> None:
    rng = np.random.default_rng(0)
    assert arrivals.plan(Scenario(concurrency=4), 10, rng).kind == "closed"
    p = arrivals.plan(Scenario(concurrency=None, rate=5.0), 10, rng)
    assert p.kind == "open" and p.concurrency is None and len(p.offsets) == 10
    assert arrivals.plan(Scenario(rate=math.inf), 10, rng).kind == "all-at-once"


def test_length_distributions(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    assert sample_lengths(7, 3, rng) == [7, 7, 7]
    u = sample_lengths(Uniform(low=5, high=9), 500, rng)
    assert min(u) == 5 and max(u) == 9
    n = sample_lengths(Normal(mean=3, std=10), 500, rng)
    assert min(n) >= 1
    f = tmp_path / "lens.txt"
    f.write_text("# lengths\n10\n20\n")
    assert set(sample_lengths(FromFile(path=f), 100, rng)) == {10, 20}
    f.write_text("10\nabc\n")
    with pytest.raises(ServetuneError, match=r"lens.txt:2"):
        sample_lengths(FromFile(path=f), 1, rng)


def test_dataset_rows_and_errors_name_the_line(tmp_path: Path) -> None:
    ds = tmp_path / "d.jsonl"
    ds.write_text('{"prompt": "hello", "output_len": 8}\n\n{"input_len": 30, "output_len": 4}\n')
    rows = read_dataset(ds)
    assert rows[0].prompt == "hello" and rows[0].output_len == 8 and rows[1].input_len == 30
    specs = request_specs(Scenario(dataset=ds, num_prompts=5), 5, np.random.default_rng(0))
    assert [s.output_len for s in specs] == [8, 4, 8, 4, 8]
    ds.write_text('{"prompt": "a"}\n{"input_len": 0, "output_len": 4}\n')
    with pytest.raises(ServetuneError, match=r"d.jsonl:2: 'input_len'"):
        read_dataset(ds)


def test_sweep_preset_sends_one_request_per_size() -> None:
    sc = preset("prefill-sweep", sweep_input_lens=[16, 32, 64])
    specs = request_specs(sc, 3, np.random.default_rng(0))
    assert [s.input_len for s in specs] == [16, 32, 64]


def _sse(*objs: object) -> bytes:
    return b"".join(b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs)


def _chunk(n: int, text: str = " t1") -> dict:
    return {"choices": [{"index": 0, "text": text}], "usage": {"prompt_tokens": 4, "completion_tokens": n}}


def test_parse_stream_stamps_each_event_with_the_read_that_completed_it() -> None:
    body = _sse(_chunk(1), _chunk(3), {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}},
                b"[DONE]")
    first_end = body.index(b"\n\n") + 2
    # read 1 ends mid-way through event 2; read 2 completes it and carries the rest
    raw = client.Raw(times=[100, 200], chunks=[body[: first_end + 5], body[first_end + 5:]], status=200)
    r = client.parse_stream(RequestRecord(index=0, input_len=4, output_len=3, scheduled_ns=0), raw)
    assert r.error is None
    assert r.chunk_ns == [100, 200] and r.chunk_tokens == [1, 2] and r.first_token_ns == 100
    assert r.prompt_tokens == 4 and r.output_tokens == 3


def test_parse_stream_on_a_whole_body_with_the_reads_it_arrived_in() -> None:
    body = _sse(_chunk(1), _chunk(3), {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}},
                b"[DONE]")
    first_end = body.index(b"\n\n") + 2
    # four reads: event 1 and a bit; framing only (the body did not grow); the rest of event 2; the tail
    second_end = body.index(b"\n\n", first_end) + 2
    # the body as buffered (pieces need not match reads)
    raw = client.Raw(chunks=[body[:7], body[7:]], times=[100, 150, 200, 300],
                     read_ends=[first_end + 5, first_end + 5, second_end, len(body)], status=200)
    r = client.parse_stream(RequestRecord(index=0, input_len=4, output_len=3, scheduled_ns=0), raw)
    assert r.error is None
    assert r.chunk_ns == [100, 200] and r.chunk_tokens == [1, 2] and r.output_tokens == 3


def test_parse_stream_reports_server_errors_and_truncation() -> None:
    rec = lambda: RequestRecord(index=0, input_len=4, output_len=3, scheduled_ns=0)  # noqa: E731
    err = client.Raw(times=[1], chunks=[_sse({"error": {"message": "overloaded", "code": 503}})])
    assert "overloaded" in (client.parse_stream(rec(), err).error or "")
    cut = client.Raw(times=[1], chunks=[_sse(_chunk(1))])
    assert client.parse_stream(rec(), cut).error == "stream ended without [DONE]"
    http = client.Raw(error="HTTP 400: bad")
    assert client.parse_stream(rec(), http).error == "HTTP 400: bad"


def test_request_body_asks_for_per_chunk_usage() -> None:
    body = json.loads(client.request_body("chat", "m", "hi", 5, True))
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["messages"][0]["content"] == "hi" and body["max_completion_tokens"] == 5 and body["ignore_eos"]
    body = json.loads(client.request_body("completions", "m", "hi", 5, False))
    assert body["prompt"] == "hi" and body["max_tokens"] == 5 and "ignore_eos" not in body


def test_client_bound_thresholds() -> None:
    quiet = dict(loop_lag_ns=[100_000] * 100, schedule_delay_ns=[50_000] * 100, cpu_busy=[0.3],
                 requested_rate=10.0, sent=100, start_ns=0, last_dispatch_ns=10 * 10**9,
                 cap_waits=0, workers=1)
    assert health.assess(**quiet)["client_bound"] is False
    for change, word in [({"loop_lag_ns": [20_000_000] * 100, "cpu_busy": [0.7]}, "loop lag"),
                         ({"schedule_delay_ns": [50_000_000] * 100}, "schedule delay"),
                         ({"cpu_busy": [0.3, 0.97]}, "CPU"),
                         ({"last_dispatch_ns": 20 * 10**9}, "achieved")]:
        h = health.assess(**{**quiet, **change})
        assert h["client_bound"] and word in " ".join(h["reasons"])
    # lag with an idle client: the machine is contended, the run is kept with a warning
    contended = health.assess(**{**quiet, "loop_lag_ns": [20_000_000] * 100})
    assert not contended["client_bound"] and contended["contended"] and "20.0 ms" in contended["warnings"][0]
    # a slow server that makes requests wait for a concurrency slot is not the client's fault
    assert not health.assess(**{**quiet, "last_dispatch_ns": 20 * 10**9, "cap_waits": 5})["client_bound"]
