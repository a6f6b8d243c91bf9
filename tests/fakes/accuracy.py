"""Client stamps against the FAKE streaming server's send times (its /fake/log): the truth on
one host, where both sides share CLOCK_MONOTONIC. Used by the accuracy test and benchmark."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np

from servetune.load import client, metrics
from tests.fakes.fake_stream_server import prompt_key

OUT_LEN = 48


def measure(url: str, endpoint: str, streams: int) -> tuple[client.DriveResult, dict[str, list[int]], list[str]]:
    prompts = [f"nonce{i}-{time.perf_counter_ns()} t1 t2 t3" for i in range(streams)]
    jobs = [client.Job(i, 4, OUT_LEN, client.request_body(endpoint, "fake-model", p, OUT_LEN, True))
            for i, p in enumerate(prompts)]
    res = client.run(client.drive(url + client.endpoint_path(endpoint), jobs, concurrency=streams,
                                  start_ns=time.perf_counter_ns()))
    truth = json.loads(urllib.request.urlopen(url + "/fake/log").read())
    return res, truth, prompts


def errors_ms(res: client.DriveResult, truth: dict[str, list[int]], prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """|client stamp - server send stamp| of every first token (TTFT) and every later chunk (ITL)."""
    assert len(res.records) == len(prompts)
    ttft_err, itl_err = [], []
    for rec, prompt in zip(sorted(res.records, key=lambda r: r.index), prompts):
        assert metrics.succeeded(rec), rec.error
        sent = truth[prompt_key(prompt)]
        assert len(rec.chunk_ns) == len(sent)
        assert rec.output_tokens == OUT_LEN and sum(rec.chunk_tokens) == OUT_LEN
        ttft_err.append(metrics.ttft_s(rec) - (sent[0] - rec.dispatch_ns) / 1e9)
        itl_err.extend(np.asarray(metrics.itls_s(rec)) - np.diff(sent) / 1e9)
    return np.abs(ttft_err) * 1e3, np.abs(itl_err) * 1e3
