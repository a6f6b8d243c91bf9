"""How one Run is made and where it goes: everything `run_scenario` takes besides the server,
the model and the Scenario."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..vocabulary import ANY_ENGINE_METRIC_NAMES, MetricNames
from .client import ShouldStop

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RunOptions:
    """The settings of one Run; the defaults measure once, write nothing and report vLLM's fields."""

    tokenizer_dir: Path | None = None
    """A model directory with tokenizer.json (None: the server's /tokenize)."""

    out_dir: Path | None = None
    """Where `<run_id>.json` (vllm-bench fields + extras) and `<run_id>.requests.jsonl` go (None: no files)."""

    run_id: str = "run"
    """The stem of the run's file names in `out_dir`."""

    slo: dict[str, float] | None = None
    """Milliseconds by name (`metrics.SLO_NAMES`) that a request must meet to count for goodput."""

    percentiles: tuple[float, ...] | list[float] = (50, 90, 95, 99)
    """The percentiles the summary reports of each latency."""

    progress: Progress | None = None
    """Called with (requests done, total) as the measured phase goes."""

    workers: int = 1
    """Client processes for the measured phase (more when one core cannot keep up)."""

    api_key: str | None = field(default=None, repr=False)
    """Sent as a bearer token with every request (never written anywhere, nor shown by repr)."""

    should_stop: ShouldStop | None = None
    """See `client.drive`; a run it ends keeps what it measured (`summary["stopped_early"]` is
    True, the requests it cancelled count as failed). Needs workers=1."""

    metric_names: MetricNames = ANY_ENGINE_METRIC_NAMES
    """The server's /metrics families (its engine's; every engine's for a server of unknown kind)."""

    detailed: bool = True
    """The JSON also holds vLLM's per-request arrays (`--save-detailed`: ttfts, itls, ...); the
    JSONL has every request either way, so many stored runs leave them out."""

    kv_cache_tokens: int | None = None
    """The server's KV pool in tokens, from its boot log (None: not known, e.g. a server servetune
    did not boot); with it a trace Run's summary adds `prefix_hit_rate_pool`."""

    result_name: str | None = None
    """The JSON's file name in `out_dir` (default `<run_id>.json`)."""

    @property
    def result_file(self) -> str:
        """The JSON's file name in `out_dir`."""
        return self.result_name or f"{self.run_id}.json"
