"""Client accuracy against the FAKE streaming server, whose chunk send times are the truth.

Both run on one host, so the server's perf_counter_ns stamps and the client's share a clock.
The error of a stamp is (client receive stamp - server send stamp). The claim is about the
client, not about a host shared with other work: the host only adds error, so the best of up
to five runs is judged.
"""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest

from servetune.load import client, metrics
from tests.fakes.fake_stream_server import prompt_key
from tests.fakes.launch import fake_server

STREAMS = 256
OUT_LEN = 48
ATTEMPTS = 5
TAIL_BOUND_MS = 10.0


def _measure(url: str, endpoint: str) -> tuple[client.DriveResult, dict[str, list[int]], list[str]]:
    prompts = [f"nonce{i}-{time.perf_counter_ns()} t1 t2 t3" for i in range(STREAMS)]
    jobs = [client.Job(i, 4, OUT_LEN, client.request_body(endpoint, "fake-model", p, OUT_LEN, True))
            for i, p in enumerate(prompts)]
    res = client.run(client.drive(url + client.endpoint_path(endpoint), jobs, concurrency=STREAMS,
                                  start_ns=time.perf_counter_ns()))
    truth = json.loads(urllib.request.urlopen(url + "/fake/log").read())
    return res, truth, prompts


def _errors_ms(res: client.DriveResult, truth: dict[str, list[int]], prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """|client stamp - server send stamp| of every first token (TTFT) and every later chunk (ITL)."""
    assert len(res.records) == STREAMS
    ttft_err, itl_err = [], []
    for rec, prompt in zip(sorted(res.records, key=lambda r: r.index), prompts):
        assert metrics.succeeded(rec), rec.error
        sent = truth[prompt_key(prompt)]
        assert len(rec.chunk_ns) == len(sent)
        assert rec.output_tokens == OUT_LEN and sum(rec.chunk_tokens) == OUT_LEN
        ttft_err.append(metrics.ttft_s(rec) - (sent[0] - rec.dispatch_ns) / 1e9)
        itl_err.extend(np.asarray(metrics.itls_s(rec)) - np.diff(sent) / 1e9)
    return np.abs(ttft_err) * 1e3, np.abs(itl_err) * 1e3


@pytest.mark.parametrize("endpoint,tokens_per_chunk", [("completions", 1), ("chat", 1), ("completions", 3)])
def test_ttft_and_itl_stamps_track_the_truth_at_256_streams(endpoint: str, tokens_per_chunk: int) -> None:
    """The typical stamp is within 1 ms of the truth, the tail within TAIL_BOUND_MS.

    The tail is bounded by this host, not by the client: on the 2-core VM a bare asyncio timer
    already wakes up to 1.1-1.4 ms late (p99, nothing else running), and a burst of 256
    simultaneous chunks is read one after another, so p99 errors of 1.3-3.5 ms were measured
    here. The host only ever adds error, so the client is judged by its best of ATTEMPTS runs
    (every run is printed); the bounds still catch work on the hot path (parsing JSON on
    arrival would add tens of microseconds per chunk x 256 streams to every burst).
    """
    seen = []
    with fake_server(ttft_ms=100, itl_ms=50, tokens_per_chunk=tokens_per_chunk) as url:
        for attempt in range(ATTEMPTS):
            res, truth, prompts = _measure(url, endpoint)
            ttft_ms, itl_ms = _errors_ms(res, truth, prompts)
            lag_p99_ms = float(np.percentile(res.loop_lag_ns, 99)) / 1e6 if res.loop_lag_ns else 0.0
            row = (float(np.median(ttft_ms)), float(np.percentile(ttft_ms, 99)),
                   float(np.median(itl_ms)), float(np.percentile(itl_ms, 99)))
            seen.append(row)
            print(f"{endpoint} k={tokens_per_chunk} attempt {attempt}: loop lag p99 {lag_p99_ms:.2f} ms; "
                  f"TTFT error p50 {row[0]:.3f} p99 {row[1]:.3f} ms; ITL error p50 {row[2]:.3f} p99 {row[3]:.3f} ms")
            if row[0] <= 1.0 and row[2] <= 1.0 and row[1] <= TAIL_BOUND_MS and row[3] <= TAIL_BOUND_MS:
                return
    pytest.fail(f"no run within bounds (TTFT p50, p99, ITL p50, p99 in ms): {seen}")
