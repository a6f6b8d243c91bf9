"""Metric formulas on hand-computed records (times in ns, expected values worked out by hand)."""

from __future__ import annotations

import pytest

from servetune.load import metrics
from servetune.load.records import RequestRecord

MS = 1_000_000


def rec(index: int, dispatch_ms: float, chunks_ms: list[float], tokens: list[int] | None = None,
        out: int | None = None, prompt: int | None = 10, scheduled_ms: float | None = None,
        error: str | None = None) -> RequestRecord:
    chunk_ns = [int(c * MS) for c in chunks_ms]
    return RequestRecord(
        index=index, input_len=10, output_len=out or len(chunks_ms),
        scheduled_ns=int((dispatch_ms if scheduled_ms is None else scheduled_ms) * MS),
        dispatch_ns=int(dispatch_ms * MS), first_token_ns=chunk_ns[0] if chunk_ns else None,
        chunk_ns=chunk_ns, chunk_tokens=tokens if tokens is not None else [1] * len(chunk_ns),
        end_ns=(chunk_ns[-1] + MS) if chunk_ns else int(dispatch_ms * MS),
        prompt_tokens=prompt, output_tokens=out if out is not None else len(chunks_ms), error=error)


# A: sent at 0, chunks at 100, 110, 130 ms (3 tokens) -> TTFT 100, ITLs 10, 20, E2EL 130, TPOT 15
# B: sent at 50, chunks at 250, 260 (2 tokens), scheduled at 40 -> TTFT 200, ITL 10, E2EL 210, TPOT 10
# C: failed
RECORDS = [
    rec(0, 0, [100, 110, 130]),
    rec(1, 50, [250, 260], prompt=12, scheduled_ms=40),
    rec(2, 60, [], error="HTTP 500: boom"),
]


def test_vllm_fields_on_hand_computed_records() -> None:
    s = metrics.summarize(RECORDS, duration_s=0.5, percentiles=(50, 99))
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["total_input_tokens"] == 22 and s["total_output_tokens"] == 5
    assert s["request_throughput"] == pytest.approx(4.0)
    assert s["output_throughput"] == pytest.approx(10.0)
    assert s["total_token_throughput"] == pytest.approx(54.0)
    assert s["request_goodput"] is None
    assert s["mean_ttft_ms"] == pytest.approx(150.0)
    assert s["median_ttft_ms"] == pytest.approx(150.0)
    assert s["std_ttft_ms"] == pytest.approx(50.0)  # population std, as numpy/vLLM
    assert s["p99_ttft_ms"] == pytest.approx(100 + 0.99 * 100)  # linear interpolation
    assert s["mean_tpot_ms"] == pytest.approx(12.5)
    assert s["mean_itl_ms"] == pytest.approx((10 + 20 + 10) / 3)
    assert s["median_itl_ms"] == pytest.approx(10.0)
    assert s["mean_e2el_ms"] == pytest.approx(170.0)
    assert s["p50_e2el_ms"] == pytest.approx(170.0)
    assert s["mean_e2el_from_scheduled_ms"] == pytest.approx((130 + 220) / 2)
    assert s["max_concurrent_requests"] == 2
    assert s["max_output_tokens_per_s"] == 5.0
    assert s["errors"] == ["HTTP 500: boom"]
    assert s["prompt_tokens_mismatched"] == 1 and s["prompt_tokens_max_abs_diff"] == 2


def test_goodput_uses_every_slo_and_zero_tpot_for_single_token() -> None:
    one_token = rec(3, 0, [40])
    recs = [*RECORDS, one_token]
    s = metrics.summarize(recs, duration_s=1.0, slo={"ttft": 150, "tpot": 12})
    # A: ttft 100 ok, tpot 15 > 12 -> bad; B: ttft 200 bad; one-token: ttft 40, tpot 0 -> good
    assert s["request_goodput"] == pytest.approx(1.0)
    s = metrics.summarize(recs, duration_s=1.0, slo={"e2el": 135})
    assert s["request_goodput"] == pytest.approx(2.0)  # A (130) and one-token (40)
    with pytest.raises(ValueError, match="unknown SLO"):
        metrics.summarize(recs, 1.0, slo={"itl": 5})


def test_itl_per_token_splits_multi_token_chunks() -> None:
    # chunks at 100 (2 tokens), 130 (3 tokens), 140 (1 token): a chunk of k tokens gives k gaps of gap/k
    r = rec(0, 0, [100, 130, 140], tokens=[2, 3, 1], out=6)
    assert metrics.itls_s(r) == pytest.approx([0.030, 0.010])
    assert metrics.itls_per_token_s(r) == pytest.approx([0.010] * 3 + [0.010])
    # a chat role chunk carries 0 tokens and is skipped by the per-token view
    r = rec(0, 0, [100, 100.05, 120], tokens=[0, 1, 1], out=2)
    assert metrics.itls_per_token_s(r) == pytest.approx([0.020 - 0.00005])
    assert metrics.tpot_s(r) == pytest.approx((0.120 - 0.100) / 1)


def test_percentile_key_matches_vllm_spelling() -> None:
    s = metrics.summarize(RECORDS[:1], 1.0, percentiles=(90, 99.9))
    assert "p90_ttft_ms" in s and "p99.9_itl_ms" in s and "p99_ttft_ms" not in s


def test_empty_or_all_failed_gives_zeros_not_errors() -> None:
    s = metrics.summarize([RECORDS[2]], 1.0)
    assert s["completed"] == 0 and s["failed"] == 1 and s["mean_ttft_ms"] == 0.0


def test_output_len_falls_back_to_chunk_token_counts() -> None:
    r = rec(0, 0, [10, 20, 30], tokens=[1, 2, 1])
    r.output_tokens = None
    assert metrics.output_len(r) == 4
