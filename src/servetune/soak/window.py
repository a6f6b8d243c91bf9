"""One soak window: a scenario run for a while against the server (load.run_scenario, its files
under the runs folder), reduced to the numbers the trend test reads."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..capacity.http import request_values
from ..load.bench import run_scenario
from ..load.options import RunOptions
from ..load.scenario import Scenario
from ..report.requests import read_records
from ..vocabulary import ANY_ENGINE_METRIC_NAMES, MetricNames, Outcome

MEASURED = (Outcome.ok, Outcome.client_bound)


@dataclass
class Window:
    index: int
    scenario: str
    start_s: float                     # from the soak's start
    end_s: float
    outcome: str
    requests: int = 0
    failed: int = 0
    ttft_ms: float | None = None       # geometric mean over the window's successful requests
    tpot_ms: float | None = None
    p99_ttft_ms: float | None = None
    rss_mib: float | None = None       # the server's process tree after the window
    kv_cache_usage: float | None = None  # peak, % of the pool
    preemptions: float | None = None   # during the window, per 100 requests
    run: str | None = None             # the run's JSON under the runs folder
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mid_hours(self) -> float:
        return (self.start_s + self.end_s) / 2 / 3600

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_scenario(sc: Scenario, seconds: float, index: int) -> Scenario:
    """`sc` sending for `seconds` (a trace or a prefill sweep: replayed whole), seeded per window.
    Its warm-up requests stay: they size the window's prompt pool (load.bench), and are load too."""
    fields = sc.model_dump()
    if sc.trace is None and not sc.sweep_input_lens:
        fields.update(duration_s=seconds, num_prompts=None)
    fields.update(seed=sc.seed + index)
    return Scenario.model_validate(fields)


def _geomean(values: list[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in positive) / len(positive)) if positive else None


def measure_window(url: str, sc: Scenario, index: int, t0: float, runs_dir: Path, *, model: str | None,
                   metric_names: MetricNames = ANY_ENGINE_METRIC_NAMES,
                   tokenizer_dir: Path | None, api_key: str | None) -> Window:
    """Run window `index` (`sc` already shaped by window_scenario); `t0`: the soak's start (monotonic)."""
    run_id = f"window{index:04d}-{sc.name}"
    start = time.monotonic() - t0
    result = run_scenario(url, model, sc, RunOptions(tokenizer_dir=tokenizer_dir, out_dir=runs_dir, run_id=run_id,
                                                     api_key=api_key, metric_names=metric_names))
    w = Window(index, sc.name, start, time.monotonic() - t0, result.outcome.value,
               run=str(runs_dir / f"{run_id}.json"), error=result.error)
    if result.records_path is None:
        return w
    measured = [r for r in read_records(Path(result.records_path)) if not r.warmup]
    values = request_values(measured)
    ttft = [float(a[0]) for a in values["ttft"]]
    w.requests, w.failed = len(measured), len(measured) - len(ttft)
    if result.outcome in MEASURED:
        w.ttft_ms, w.tpot_ms = _geomean(ttft), _geomean([float(a[0]) for a in values["tpot"]])
        w.p99_ttft_ms = result.summary.get("p99_ttft_ms")
    stats = result.server_stats
    if "peak_kv_cache_usage" in stats:
        w.kv_cache_usage = 100.0 * float(stats["peak_kv_cache_usage"])
    if "preemptions" in stats and w.requests:
        w.preemptions = 100.0 * float(stats["preemptions"]) / w.requests
    return w
