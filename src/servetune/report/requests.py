"""Per-request latencies read back from a run's JSONL of RequestRecords (warmups excluded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..errors import ServetuneError
from ..load import metrics
from ..load.records import RequestRecord

# Per-request series, named like the vllm-bench metrics they underlie (values in ms).
SERIES = ("ttft", "tpot", "itl", "e2el")


def resolve(path: str | Path | None, base_dir: Path | None) -> Path | None:
    """A records path as stored (absolute, or relative to the study/result directory); None if missing."""
    if not path:
        return None
    p = Path(path)
    candidates = [p] if p.is_absolute() else [p, *([base_dir / p] if base_dir else [])]
    return next((c for c in candidates if c.is_file()), None)


def read_records(path: Path) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(RequestRecord.model_validate_json(line))
            except ValueError as exc:
                raise ServetuneError(f"{path}:{lineno}: not a request record ({exc})") from exc
    return out


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
