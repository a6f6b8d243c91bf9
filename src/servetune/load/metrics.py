"""Run summaries with the definitions and JSON field names of `vllm bench serve`.

Mirrors vllm/benchmarks/serve.py::calculate_metrics and the stamps of
vllm/benchmarks/lib/endpoint_request_func.py:
- a request succeeded when it got at least one chunk with non-empty `choices`;
- TTFT = first such chunk - send; ITL = gaps between such chunks; E2EL ("latency") =
  last such chunk - send (the trailing usage chunk and [DONE] do not count);
- TPOT = (E2EL - TTFT) / (output_len - 1) for output_len > 1, output_len from usage;
- mean/median/std (population) and numpy's linear percentiles, in ms;
- goodput counts requests meeting every SLO, where TPOT is 0 for one-token outputs.

servetune's extras sit beside them under their own names: ITL per token (a chunk carrying k
tokens contributes k gaps of gap/k), E2EL from the scheduled arrival time (includes client
queueing), and the prompt-length check against the server's usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..stats.intervals import goodput_ci
from .records import STOPPED_EARLY, RequestRecord

NS = 1e9
SLO_NAMES = ("ttft", "tpot", "e2el")
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")


def percentile_key(p: float) -> str:
    """vLLM's spelling: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def succeeded(rec: RequestRecord) -> bool:
    return rec.error is None and rec.first_token_ns is not None and bool(rec.chunk_ns)


def missed_every_slo(rec: RequestRecord) -> bool:
    """A request that ended without its answer (an error status, a broken or stalled stream, the
    run's deadline): above every latency limit, for an SLO. Not one in flight when the run was
    stopped early on purpose (the stop's own rule judged those)."""
    return not succeeded(rec) and not (rec.error or "").startswith(f"{STOPPED_EARLY}:")


def output_len(rec: RequestRecord) -> int:
    """Tokens generated: the server's usage, else the chunks' counts (vLLM counts text then)."""
    if rec.output_tokens:
        return rec.output_tokens
    return max(sum(rec.chunk_tokens), 1) if rec.chunk_tokens else 1


def prompt_len(rec: RequestRecord) -> int:
    return rec.prompt_tokens if rec.prompt_tokens is not None else rec.input_len


def ttft_s(rec: RequestRecord) -> float:
    assert rec.first_token_ns is not None
    return (rec.first_token_ns - rec.dispatch_ns) / NS


def latency_s(rec: RequestRecord) -> float:
    return (rec.chunk_ns[-1] - rec.dispatch_ns) / NS


def itls_s(rec: RequestRecord) -> list[float]:
    gaps: list[float] = (np.diff(np.asarray(rec.chunk_ns, dtype=np.int64)) / NS).tolist()
    return gaps


def itls_per_token_s(rec: RequestRecord) -> list[float]:
    """Gaps between token-carrying chunks, split evenly over the tokens a chunk carries."""
    if not rec.chunk_tokens:
        return itls_s(rec)
    out: list[float] = []
    prev: int | None = None
    for t_ns, k in zip(rec.chunk_ns, rec.chunk_tokens):
        if k <= 0:
            continue
        if prev is not None:
            out.extend([(t_ns - prev) / NS / k] * k)
        prev = t_ns
    return out


def tpot_s(rec: RequestRecord) -> float:
    n = output_len(rec)
    return (latency_s(rec) - ttft_s(rec)) / (n - 1) if n > 1 else 0.0


def stat_fields(name: str, values_s: Sequence[float], percentiles: Iterable[float]) -> dict[str, float]:
    """mean/median/std/pXX of a metric in ms, 0 when empty (as vLLM does)."""
    arr = np.asarray(values_s if len(values_s) else [0.0], dtype=np.float64) * 1000.0
    out = {
        f"mean_{name}_ms": float(np.mean(arr)),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(np.std(arr)),
    }
    for p in percentiles:
        out[f"p{percentile_key(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def _peaks(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s / max_concurrent_requests: one-second buckets from the
    first send, one token per chunk, a request active in every second it spans."""
    if not ok:
        return 0.0, 0
    t0 = min(r.dispatch_ns for r in ok)
    t_end = max(r.chunk_ns[-1] for r in ok)
    n_buckets = int(np.ceil((t_end - t0) / NS)) + 1
    tokens = np.zeros(n_buckets)
    active = np.zeros(n_buckets)
    for r in ok:
        buckets = ((np.asarray(r.chunk_ns, dtype=np.int64) - t0) / NS).astype(np.int64)
        np.add.at(tokens, buckets[(buckets >= 0) & (buckets < n_buckets)], 1)
        start = int((r.dispatch_ns - t0) / NS)
        end = int((r.chunk_ns[-1] - t0) / NS)
        active[start : end + 1] += 1
    return float(tokens.max()), int(active.max())


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    percentiles: Sequence[float] = (50, 90, 95, 99),
    slo: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The `vllm bench serve` result fields (scalars) plus servetune's extras.

    `records` are the measured requests (warmups excluded); `duration_s` is the measured
    phase from its start until the last request finished, as in vLLM.
    """
    slo = dict(slo or {})
    bad = [k for k in slo if k not in SLO_NAMES]
    if bad:
        raise ValueError(f"unknown SLO name(s) {bad}; known: {', '.join(SLO_NAMES)}")
    ok = [r for r in records if succeeded(r)]
    failed = len(records) - len(ok)
    ttfts = [ttft_s(r) for r in ok]
    lats = [latency_s(r) for r in ok]
    out_lens = [output_len(r) for r in ok]
    tpots = [tpot_s(r) for r in ok if output_len(r) > 1]
    itls = [x for r in ok for x in itls_s(r)]
    total_input = sum(prompt_len(r) for r in ok)
    total_output = sum(out_lens)

    dur = duration_s if duration_s > 0 else float("nan")
    max_tok_s, max_conc = _peaks(ok)
    summary: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / dur,
        "request_goodput": None,
        "output_throughput": total_output / dur,
        "total_token_throughput": (total_input + total_output) / dur,
        "max_output_tokens_per_s": max_tok_s,
        "max_concurrent_requests": max_conc,
    }
    if slo:
        summary.update(goodput_fields(records, slo, duration_s))
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", lats)):
        summary.update(stat_fields(name, values, percentiles))

    # servetune's extras
    summary.update(stat_fields("itl_per_token", [x for r in ok for x in itls_per_token_s(r)], percentiles))
    summary.update(stat_fields(
        "e2el_from_scheduled", [(r.chunk_ns[-1] - r.scheduled_ns) / NS for r in ok], percentiles))
    summary.update(send_lateness(records))
    checked = [r for r in ok if r.prompt_tokens is not None]
    mismatched = [r for r in checked if r.prompt_tokens != r.input_len]
    summary["prompt_tokens_checked"] = len(checked)
    summary["prompt_tokens_mismatched"] = len(mismatched)
    summary["prompt_tokens_max_abs_diff"] = max(
        (abs((r.prompt_tokens or 0) - r.input_len) for r in mismatched), default=0)
    summary["errors"] = sorted({(r.error or "")[:200] for r in records if not succeeded(r)})[:10]
    return summary


def meets_slo(records: Sequence[RequestRecord], slo: Mapping[str, float]) -> np.ndarray:
    """Per request, in the order sent: whether it succeeded and met every per-request limit of
    `slo` (ms by name, SLO_NAMES; TPOT 0 for a one-token output, as vLLM's goodput counts it)."""
    limits = {k: v / 1000.0 for k, v in slo.items()}
    values = {"ttft": ttft_s, "tpot": tpot_s, "e2el": latency_s}
    return np.asarray([succeeded(r) and all(values[k](r) <= lim for k, lim in limits.items())
                       for r in sorted(records, key=lambda r: r.index)], dtype=bool)


def goodput_fields(records: Sequence[RequestRecord], slo: Mapping[str, float], duration_s: float,
                   confidence: float = 0.95) -> dict[str, Any]:
    """`request_goodput` (vLLM's: requests meeting every SLO per second of the run) with its
    interval, `request_goodput_low` and `_high` (stats.intervals.goodput_ci), and the share."""
    good = meets_slo(records, slo)
    if duration_s <= 0 or not len(good):
        return {"request_goodput": int(good.sum()) / duration_s if duration_s > 0 else None}
    ci = goodput_ci(good, duration_s, confidence)
    return {"request_goodput": int(good.sum()) / duration_s, "request_goodput_low": ci.low,
            "request_goodput_high": ci.high, "goodput_share": float(good.mean())}


def send_lateness(records: Sequence[RequestRecord]) -> dict[str, float]:
    """How late requests left against their schedule (open loop, trace) or their free slot
    (closed loop): `send_lateness_{p50,p99,max}_ms` over the requests sent."""
    late = np.asarray([r.dispatch_ns - r.scheduled_ns for r in records if r.dispatch_ns], dtype=np.float64) / 1e6
    if not len(late):
        return {}
    return {"send_lateness_p50_ms": float(np.percentile(late, 50)),
            "send_lateness_p99_ms": float(np.percentile(late, 99)), "send_lateness_max_ms": float(late.max())}


def per_request_arrays(records: Sequence[RequestRecord]) -> dict[str, list[Any]]:
    """vLLM's per-request arrays (input_lens, ttfts, itls, ...), failed requests included."""
    arrays: dict[str, list[Any]] = {k: [] for k in (
        "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")}
    for r in records:
        good = succeeded(r)
        arrays["input_lens"].append(prompt_len(r))
        arrays["output_lens"].append(output_len(r) if good else 0)
        arrays["ttfts"].append(ttft_s(r) if good else 0.0)
        arrays["itls"].append(itls_s(r) if good else [])
        arrays["latencies"].append(latency_s(r) if good else 0.0)
        arrays["start_times"].append(r.dispatch_ns / NS)
        arrays["errors"].append(r.error or "")
    return arrays
