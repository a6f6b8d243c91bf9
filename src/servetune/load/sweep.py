"""The prefill sweep's answer per prompt size: time to first token and prefill tokens/s, or that
the size timed out (no first token within the sweep's per-size limit) or failed.

A size that times out is a result for that size, not the end of the run: the field reports'
sweeps read "20k: timeout" on one build and "20k: 2,473 tok/s" after a flag unblocked it."""

from __future__ import annotations

from typing import Any

from .client import STALLED
from .records import RequestRecord

OK, TIMEOUT, FAILED = "ok", "timeout", "failed"


def per_size(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """One entry per measured request, in the sweep's order: its size, TTFT, prefill rate, outcome."""
    out = []
    for rec in sorted(records, key=lambda r: r.index):
        ttft_ms = (rec.first_token_ns - rec.dispatch_ns) / 1e6 if rec.first_token_ns and rec.dispatch_ns else None
        tokens = rec.prompt_tokens or rec.input_len
        if rec.ok:
            outcome = OK
        elif (rec.error or "").startswith(STALLED) and rec.first_token_ns is None:
            outcome = TIMEOUT
        else:
            outcome = FAILED
        out.append({"input_len": rec.input_len, "prompt_tokens": rec.prompt_tokens,
                    "ttft_ms": ttft_ms if outcome == OK else None,
                    "prefill_tok_s": tokens / (ttft_ms / 1e3) if outcome == OK and ttft_ms else None,
                    "outcome": outcome, "error": rec.error})
    return out


def only_sizes_timed_out(summary: dict[str, Any]) -> bool:
    """The run's failed requests are all sizes that timed out, and some size answered: a result."""
    sizes = summary.get("prefill_sweep") or []
    return any(s["outcome"] == OK for s in sizes) and all(s["outcome"] in (OK, TIMEOUT) for s in sizes)
