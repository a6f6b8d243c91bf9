"""servetune's run summary against vLLM's own `calculate_metrics` (vllm.benchmarks.serve, the code
behind `vllm bench serve`) on the same requests: every field it reports is equal, so a difference
between the two tools on a live server can only come from when each client stamps a chunk.

The records are random but seeded: failed requests, one-token answers, chunks carrying several
tokens (usage counts them, as vLLM's client reads them), an SLO for goodput."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from servetune.load import metrics
from servetune.load.records import RequestRecord

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
PERCENTILES = [50.0, 90.0, 99.0, 99.9]
SLO_MS = {"ttft": 180.0, "tpot": 12.0, "e2el": 900.0}


def _records(rng: np.random.Generator, n: int) -> list[RequestRecord]:
    out = []
    t0 = 1_000_000_000_000  # perf_counter_ns-like origin
    for i in range(n):
        dispatch = t0 + int(rng.uniform(0, 3e9))
        if rng.random() < 0.05:
            out.append(RequestRecord(index=i, input_len=64, output_len=32, scheduled_ns=dispatch,
                                     dispatch_ns=dispatch, end_ns=dispatch + 1000, error="HTTP 500: boom"))
            continue
        n_chunks = 1 if rng.random() < 0.1 else int(rng.integers(2, 40))
        gaps = rng.gamma(2.0, 4e6, n_chunks)
        gaps[0] = rng.uniform(20e6, 300e6)  # the first chunk: TTFT
        chunk_ns = (dispatch + np.cumsum(gaps)).astype(np.int64).tolist()
        tokens = [int(k) for k in rng.choice([1, 1, 1, 2, 3], n_chunks)]
        out.append(RequestRecord(
            index=i, input_len=64, output_len=sum(tokens), scheduled_ns=dispatch, dispatch_ns=dispatch,
            first_token_ns=chunk_ns[0], chunk_ns=chunk_ns, chunk_tokens=tokens, end_ns=chunk_ns[-1] + 10_000,
            prompt_tokens=int(rng.integers(60, 70)), output_tokens=sum(tokens)))
    return out


def _vllm_output(rec: RequestRecord) -> Any:
    """What vLLM's request function would have returned for this request."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    ok = metrics.succeeded(rec)
    if not ok:
        return RequestFuncOutput(success=False, error=rec.error or "", start_time=rec.dispatch_ns / 1e9)
    return RequestFuncOutput(
        success=True, latency=metrics.latency_s(rec), output_tokens=metrics.output_len(rec),
        ttft=metrics.ttft_s(rec), itl=metrics.itls_s(rec), prompt_len=metrics.prompt_len(rec),
        start_time=rec.dispatch_ns / 1e9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summary_equals_vllm_calculate_metrics(seed: int) -> None:
    from vllm.benchmarks.serve import calculate_metrics

    records = _records(np.random.default_rng(seed), 300)
    duration_s = 3.7
    ours = metrics.summarize(records, duration_s, PERCENTILES, slo=SLO_MS)
    theirs, _ = calculate_metrics(input_requests=[], outputs=[_vllm_output(r) for r in records], dur_s=duration_s,
                                  tokenizer=None, selected_percentiles=PERCENTILES, goodput_config_dict=SLO_MS)
    assert ours["completed"] == theirs.completed and ours["failed"] == theirs.failed
    assert ours["total_input_tokens"] == theirs.total_input
    assert ours["total_output_tokens"] == theirs.total_output
    assert ours["max_concurrent_requests"] == theirs.max_concurrent_requests
    assert ours["max_output_tokens_per_s"] == theirs.max_output_tokens_per_s
    for field in ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput"):
        assert ours[field] == pytest.approx(getattr(theirs, field), rel=1e-12), field
    for name in metrics.VLLM_METRICS:
        for stat in ("mean", "median", "std"):
            key = f"{stat}_{name}_ms"
            assert ours[key] == pytest.approx(getattr(theirs, key), rel=1e-9, abs=1e-9), key
        for p, value in getattr(theirs, f"percentiles_{name}_ms"):
            key = f"p{metrics.percentile_key(p)}_{name}_ms"
            assert ours[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    assert theirs.request_goodput > 0 and theirs.request_goodput < theirs.request_throughput  # the SLO bites
