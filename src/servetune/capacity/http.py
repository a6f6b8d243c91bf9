"""`measure(level)` against one running server: a Run of the scenario at that load level through
`load.run_scenario`, ended early by a LevelMonitor through the client's `should_stop` hook."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from ..load import metrics
from ..load.bench import run_scenario
from ..load.client import Finished
from ..load.dataset import trace_specs
from ..load.options import RunOptions
from ..load.records import RequestRecord, RunResult
from ..load.scenario import Scenario
from ..vocabulary import Outcome
from .levels import LevelSample, Measure, pooled_values
from .monitor import LevelMonitor
from .sequential import Looks
from .slo import Slo, Verdict, per_request_limits

LoadKind = Literal["rate", "concurrency", "speedup"]
# Outcomes of a run whose requests still measured the server (a client-bound run is kept, marked).
_MEASURED = (Outcome.ok, Outcome.client_bound)


# A closed loop of N users sends at least this many requests per user at a level, whatever
# num_prompts says: with fewer, the level never holds N requests in flight past the first wave
# (all N prefills at once), which measures a burst, not a steady load of N users.
MIN_WAVES = 2


def ramp_of(load: LoadKind, level: float) -> int:
    """Requests at the start of a level that its SLOs are not judged on: a closed loop's first
    wave, its N users' requests all sent at once. On the H200 (Qwen3-8B, 64 users, 2048-token
    prompts) that wave's p95 TTFT was 3.3 s and the rest's 0.33 s: judged with it, a level's
    verdict measures how fast N simultaneous prompts are prefilled, not N users served steadily.
    The run's `vllm bench serve` fields still count every request."""
    return int(level) if load == "concurrency" else 0


def at_level(scenario: Scenario, load: LoadKind, level: float, num_prompts: int, run: int) -> Scenario:
    """The scenario at one load level: an open loop at `level` req/s (uncapped, its burstiness
    kept) or a closed loop of `level` users with at least MIN_WAVES requests each; a seed of its
    own per run, so that repeated runs at one level draw new arrival times. A trace's level is its
    speed-up: its own requests (num_prompts is not used), `level` times as fast."""
    if load == "speedup":
        if scenario.trace is None:
            raise ValueError("a speed-up level needs a trace scenario")
        # Copied, not re-validated from a dump: the trace keeps the study file's folder that its
        # relative path is read from.
        trace = scenario.trace.model_copy(update={"speedup": float(level)})
        return scenario.model_copy(update={"trace": trace, "seed": scenario.seed + run})
    fields = scenario.model_dump()
    if load == "rate":
        fields.update(rate=level, concurrency=None)
    else:
        users = int(level)
        fields.update(concurrency=users, rate=None)
        num_prompts = max(num_prompts, MIN_WAVES * users) + ramp_of(load, level)
    fields.update(num_prompts=num_prompts, duration_s=None, seed=scenario.seed + run)
    return Scenario.model_validate(fields)


_FAILED = np.array([np.inf])


def request_values(records: list[RequestRecord], failed: bool = False) -> dict[str, list[np.ndarray]]:
    """Per metric, one array of ms per succeeded request, in the order they were sent (TPOT only
    for outputs of more than one token, as vLLM counts it; ITL: the request's gaps). With
    `failed` (for an SLO), a request that ended without its answer (metrics.missed_every_slo)
    is an infinite value in its place: a user who got nothing is over every limit."""
    ordered = [r for r in sorted(records, key=lambda r: r.index) if not r.warmup]
    out: dict[str, list[np.ndarray]] = {"ttft": [], "tpot": [], "itl": [], "e2el": []}
    for r in ordered:
        if metrics.succeeded(r):
            out["ttft"].append(np.array([metrics.ttft_s(r) * 1000.0]))
            if metrics.output_len(r) > 1:
                out["tpot"].append(np.array([metrics.tpot_s(r) * 1000.0]))
            out["itl"].append(np.asarray(metrics.itls_s(r)) * 1000.0)
            out["e2el"].append(np.array([metrics.latency_s(r) * 1000.0]))
        elif failed and metrics.missed_every_slo(r):
            for values in out.values():
                values.append(_FAILED)
    return out


def _finished_values(event: Finished, ramp: int) -> tuple[dict[str, float], np.ndarray | None]:
    """A finished request's values (ms) for the monitor, and its ITL gaps (ms)."""
    rec = event.record
    if rec.index >= ramp and metrics.missed_every_slo(rec):
        return {"ttft": np.inf, "tpot": np.inf, "e2el": np.inf}, _FAILED
    if rec.index < ramp or not metrics.succeeded(rec):
        return {}, None
    values = {"ttft": metrics.ttft_s(rec) * 1000.0, "e2el": metrics.latency_s(rec) * 1000.0}
    if metrics.output_len(rec) > 1:
        values["tpot"] = metrics.tpot_s(rec) * 1000.0
    return values, np.asarray(metrics.itls_s(rec)) * 1000.0


def sample_from_records(level: float, records_path: Path, stopped: str | None = None,
                        load: LoadKind = "rate", stopped_verdict: str | None = None,
                        slos: Sequence[Slo] = ()) -> LevelSample:
    """A level's LevelSample from its run's request records (JSONL), as measured or as stored;
    a closed loop's first wave is not judged (ramp_of). With `slos`, each request's goodput flag
    (it met their per-request limits) too."""
    records = [RequestRecord.model_validate_json(line)
               for line in Path(records_path).read_text().splitlines() if line.strip()]
    ramp = ramp_of(load, level)
    measured = [r for r in records if not r.warmup and r.index >= ramp]
    values = request_values(measured, failed=True)
    sent = [r.dispatch_ns for r in measured if r.dispatch_ns]
    ended = [r.end_ns for r in measured if r.end_ns]
    seconds = (max(ended) - min(sent)) / 1e9 if sent and ended else 0.0
    limits = per_request_limits(slos)
    completed = sum(1 for r in measured if metrics.succeeded(r))
    failed = sum(1 for r in measured if metrics.missed_every_slo(r))
    return LevelSample(level, values, len(measured), completed, stopped, failed=failed,
                       stopped_verdict=Verdict(stopped_verdict) if stopped_verdict else None,
                       records=str(Path(records_path).resolve()), seconds=seconds,
                       good=metrics.meets_slo(measured, limits) if limits else None)


def measure_level(url: str, scenario: Scenario, slos: list[Slo], *, load: LoadKind, level: float, run: int,
                  num_prompts: int, looks: Looks, out_dir: Path, run_id: str, model: str | None = None,
                  tokenizer_dir: Path | None = None, api_key: str | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  prior: list[LevelSample] | None = None,
                  kv_cache_tokens: int | None = None) -> tuple[RunResult, LevelSample]:
    """One Run of `scenario` at `level`, ended early by a LevelMonitor (its interim looks pooled
    with the level's `prior` runs); the RunResult as `run_scenario` gave it and the level's
    sample (with `error` when it could not measure). `kv_cache_tokens`: the server's KV pool, where
    known (RunOptions)."""
    sc = at_level(scenario, load, level, num_prompts, run)
    ramp = ramp_of(load, level)
    planned = len(trace_specs(sc)) if sc.trace is not None else (sc.num_prompts or num_prompts) - ramp
    pooled = {m: pooled_values(prior or [], m) for m in ("ttft", "e2el", "tpot", "itl")}
    # A trace's rate moves with its recording: no steady offered rate to call a runaway queue by.
    monitor = LevelMonitor(slos, planned, looks.planned_alpha,
                           offered_rate=level if load == "rate" else None, burstiness=scenario.burstiness,
                           looks=looks, prior=pooled)

    def should_stop(event: Finished) -> bool:
        values, gaps = _finished_values(event, ramp)
        if event.record.index < ramp:
            return False   # the unjudged first wave is no look's business
        return monitor.observe(event.now_ns / 1e9, values, event.started - ramp, index=event.record.index,
                               gaps_ms=gaps) is not None

    # Like a study's runs, a level's JSON leaves out the per-request arrays its JSONL holds.
    result = run_scenario(url, model, sc, RunOptions(tokenizer_dir=tokenizer_dir, out_dir=out_dir, run_id=run_id,
                          api_key=api_key, should_stop=should_stop, progress=progress, detailed=False,
                          kv_cache_tokens=kv_cache_tokens, slo=per_request_limits(slos) or None))
    if result.outcome not in _MEASURED or result.records_path is None:
        return result, LevelSample(level, {}, 0, 0, error=f"{result.outcome.value}: {result.error}")
    return result, sample_from_records(level, Path(result.records_path), monitor.reason, load,
                                       monitor.verdict.value if monitor.verdict else None, slos)


def http_measure(url: str, scenario: Scenario, slos: list[Slo], *, load: LoadKind, num_prompts: int,
                 looks: Looks, out_dir: Path, model: str | None = None, tokenizer_dir: Path | None = None,
                 api_key: str | None = None, first_run: int = 0,
                 progress: Callable[[float, int, int, int], None] | None = None,
                 kv_cache_tokens: int | None = None) -> Measure:
    """A `measure(level, prior)` that runs `scenario` at each level against the server at `url`,
    writing each run's files under `out_dir` (level<NN>-<level>.json and .requests.jsonl), the
    runs numbered from `first_run`. `progress(level, run, done, total)` follows each run."""
    runs = itertools.count(first_run)

    def measure(level: float, prior: list[LevelSample]) -> LevelSample:
        run = next(runs)
        return measure_level(url, scenario, slos, load=load, level=level, run=run, num_prompts=num_prompts,
                             looks=looks, out_dir=out_dir, run_id=f"level{run:02d}-{level:g}", model=model,
                             tokenizer_dir=tokenizer_dir, api_key=api_key, prior=prior,
                             progress=(lambda d, t: progress(level, run, d, t)) if progress else None,
                             kv_cache_tokens=kv_cache_tokens)[1]

    return measure
