"""Per-request latencies read back from a run's JSONL of RequestRecords (warmups excluded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..load import metrics
from ..load.records import RequestRecord, read_records, resolve

# Per-request series, named like the vllm-bench metrics they underlie (values in ms).
SERIES = ("ttft", "tpot", "itl", "e2el")
__all__ = ["SERIES", "read_records", "resolve", "runs_series_ms", "series_ms"]


def series_ms(records: Iterable[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT, TPOT (outputs > 1 token), ITL (every chunk gap) and E2EL of the measured, successful requests."""
    ok = [r for r in records if not r.warmup and metrics.succeeded(r)]
    return {
        "ttft": np.array([metrics.ttft_s(r) for r in ok]) * 1e3,
        "tpot": np.array([metrics.tpot_s(r) for r in ok if metrics.output_len(r) > 1]) * 1e3,
        "itl": np.array([x for r in ok for x in metrics.itls_s(r)]) * 1e3,
        "e2el": np.array([metrics.latency_s(r) for r in ok]) * 1e3,
    }


def runs_series_ms(paths: Sequence[Path]) -> list[dict[str, np.ndarray]]:
    """One series dict per run (the unit a hierarchical bootstrap resamples)."""
    return [series_ms(read_records(p)) for p in paths]
