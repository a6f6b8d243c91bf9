"""One Run: a Scenario measured once on one running server.

prepare prompts (before any timing) -> warmups -> scrape /metrics -> measured phase (in this
process or in worker processes) -> scrape again -> parse, summarize, self-check -> files.
Server failures never raise: failed requests are counted, an unreachable server is an error
in the RunResult.
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing as mp
import secrets
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from .. import server_http
from ..errors import ServetuneError
from ..vocabulary import ANY_ENGINE_METRIC_NAMES, MetricNames, Outcome, for_http_status
from . import arrivals, classes, client, health, metrics, sweep
from .dataset import RequestSpec, request_specs, trace_specs, unshared
from .options import Progress, RunOptions
from .prompts import LocalTokenizer, PromptFactory, RemoteTokenizer, Tokenizer
from .records import RequestRecord, RunResult, RunSummary
from .scenario import Scenario
from .scrape import Scraper
from .trace import fidelity
from .trace.synth import TracePrompts

_START_LEAD_NS = 50_000_000          # schedule origin this far ahead, so worker 0 is not late
_MAX_DURATION_PROMPTS = 100_000
_API_TIMEOUT = aiohttp.ClientTimeout(total=120)
# The measured phase ends itself at the run's deadline (client.drive); this much later the
# whole run is given up, wherever it is (a hung /tokenize while preparing prompts).
_BACKSTOP_GRACE_S = 30.0


async def _alive(base_url: str, api_key: str | None) -> bool:
    try:
        async with server_http.session(api_key, aiohttp.ClientTimeout(total=10)) as s:
            async with s.get(base_url + "/health") as resp:
                return resp.status == 200
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


class _Prepared:
    """The Jobs of a Run and what prompt synthesis learned on the way."""

    def __init__(self) -> None:
        self.inexact = 0
        self.chat_overhead = 0


async def _make_jobs(factory: PromptFactory, scenario: Scenario, model: str, specs: list[RequestSpec],
                     rng: np.random.Generator, first_index: int, warmup: bool, info: _Prepared,
                     blocks: TracePrompts | None = None) -> list[client.Job]:
    share = scenario.shared_prefix.share if scenario.shared_prefix else 0.0
    jobs = []
    for i, spec in enumerate(specs):
        if spec.prompt is not None:
            prompt = await factory.with_nonce(spec.prompt)
        elif blocks is not None and spec.input_len is not None:
            prompt = await blocks.make(spec.input_len, spec.hash_ids)
        else:
            assert spec.input_len is not None
            prompt = await factory.make(spec.input_len, with_prefix=bool(rng.random() < share))
        info.inexact += not prompt.exact
        body = client.request_body(scenario.endpoint, model, prompt.text, spec.output_len, scenario.ignore_eos,
                                   scenario.temperature)
        jobs.append(client.Job(first_index + i, prompt.tokens, spec.output_len, body, warmup,
                               follows=None if spec.follows is None else first_index + spec.follows,
                               traffic_class=spec.traffic_class))
    return jobs


@dataclass(frozen=True)
class _Limits:
    """What bounds a Run, passed to every client process: the server's key rides along here
    (in memory and through the worker pipe, never into a file)."""

    api_key: str | None
    stall_timeout_s: float
    end_by_ns: int  # perf_counter_ns: the run's deadline
    metric_names: MetricNames = ANY_ENGINE_METRIC_NAMES  # the server's /metrics families


def _worker(args: tuple[str, list[client.Job], int | None, int, int | None, _Limits]) -> client.DriveResult:
    url, jobs, concurrency, start_ns, deadline_ns, limits = args

    def tick() -> None:
        with _COUNTER.get_lock():
            _COUNTER.value += 1

    return client.run(client.drive(url, jobs, concurrency=concurrency, start_ns=start_ns,
                                    deadline_ns=deadline_ns, on_done=tick, **_drive_limits(limits)))


def _drive_limits(limits: _Limits) -> dict[str, Any]:
    return {"end_by_ns": limits.end_by_ns, "api_key": limits.api_key, "stall_timeout_s": limits.stall_timeout_s}


_COUNTER: Any = None


def _init_worker(counter: Any) -> None:
    global _COUNTER
    _COUNTER = counter
    # Ctrl-C reaches the whole process group: the parent alone handles it (and ends the workers),
    # instead of each worker printing its own KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the client processes now: a run given up (Ctrl-C) must not wait for their streams to end."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):  # the executor's own workers
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _split(total: int | None, parts: int) -> list[int | None]:
    if total is None:
        return [None] * parts
    return [total // parts + (1 if w < total % parts else 0) for w in range(parts)]


async def _measure(url: str, jobs: list[client.Job], concurrency: int | None, workers: int,
                   deadline_s: float | None, progress: Progress | None,
                   limits: _Limits, should_stop: client.ShouldStop | None) -> tuple[list[client.DriveResult], int]:
    total = len(jobs)
    if any(job.follows is not None for job in jobs):
        workers = 1  # a session's turns wait for each other: they must share a process
    # Each worker sends a fixed share of the jobs (every workers-th) with its share of the
    # concurrency: a closed loop becomes `workers` independent closed loops of the same total.
    workers = min(workers, total, concurrency or total)
    if workers <= 1:
        done = 0

        def on_done() -> None:
            nonlocal done
            done += 1
            if progress:
                progress(done, total)

        start_ns = time.perf_counter_ns() + _START_LEAD_NS
        deadline = start_ns + int(deadline_s * 1e9) if deadline_s else None
        res = await client.drive(url, jobs, concurrency=concurrency, start_ns=start_ns,
                                 deadline_ns=deadline, on_done=on_done, should_stop=should_stop,
                                 **_drive_limits(limits))
        return [res], start_ns
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(counter,)) as pool:
        # Start every worker (spawn + imports) before the schedule's origin is fixed.
        await asyncio.gather(*(loop.run_in_executor(pool, time.sleep, 0.2) for _ in range(workers)))
        start_ns = time.perf_counter_ns() + 4 * _START_LEAD_NS
        deadline = start_ns + int(deadline_s * 1e9) if deadline_s else None
        caps = _split(concurrency, workers)
        futs = [loop.run_in_executor(pool, _worker, (url, jobs[w::workers], caps[w], start_ns, deadline, limits))
                for w in range(workers)]
        gathered = asyncio.gather(*futs)
        try:
            while not gathered.done():
                await asyncio.wait([gathered], timeout=0.2)
                if progress:
                    progress(min(counter.value, total), total)
        except (asyncio.CancelledError, KeyboardInterrupt):
            gathered.cancel()
            # The cancelled gather's outcome is nobody's: taken here, asyncio logs nothing about it.
            gathered.add_done_callback(lambda f: f.cancelled() or f.exception())
            _end_workers(pool)
            raise
        return list(gathered.result()), start_ns


def pick_tokenizer(session: aiohttp.ClientSession, base_url: str, model: str,
                    tokenizer_dir: Path | None) -> tuple[Tokenizer, str]:
    if tokenizer_dir is not None and (tokenizer_dir / "tokenizer.json").is_file():
        return LocalTokenizer(tokenizer_dir), f"local:{tokenizer_dir}"
    return RemoteTokenizer(session, base_url, model), "server:/tokenize"


async def arun_scenario(base_url: str, model: str | None, scenario: Scenario,
                        options: RunOptions = RunOptions()) -> RunResult:
    """The async core of `run_scenario`."""
    base_url = base_url.rstrip("/")
    bad = [k for k in (options.slo or {}) if k not in metrics.SLO_NAMES]
    if bad:
        raise ServetuneError(f"unknown SLO name(s) {bad}; known: {', '.join(metrics.SLO_NAMES)}")
    if options.should_stop is not None and options.workers > 1:
        raise ValueError("should_stop needs the measured phase in this process (workers=1)")
    run_timeout_s = scenario.effective_run_timeout_s
    limits = _Limits(options.api_key, scenario.effective_stall_timeout_s,
                     time.perf_counter_ns() + int(run_timeout_s * 1e9), options.metric_names)
    try:
        return await asyncio.wait_for(_run(base_url, model, scenario, options, limits),
                                      run_timeout_s + _BACKSTOP_GRACE_S)
    except TimeoutError:
        return RunResult(scenario=scenario.name, outcome=Outcome.run_timeout,
                         error=f"the run passed its deadline of {run_timeout_s:.0f} s (run_timeout_s) "
                               f"before its measured phase ended")


async def _run(base_url: str, model: str | None, scenario: Scenario, options: RunOptions,
               limits: _Limits) -> RunResult:
    result = RunResult(scenario=scenario.name)
    setup = await _prepare(result, base_url, model, scenario, options.tokenizer_dir, limits)
    if isinstance(setup, RunResult):
        return setup
    url = base_url + client.endpoint_path(scenario.endpoint)
    warm = await _warm_up(url, setup.warm_jobs, scenario, limits)
    if warm is not None and (warm.timed_out or warm.stalled):
        return _ended_early(result, [warm], limits, base_url, "warmup")
    if not setup.specs:  # duration only: size the prompt pool from the warmups' pace
        setup.specs = request_specs(scenario, _duration_pool(scenario, warm), setup.rng)
    jobs = await _measured_jobs(result, base_url, scenario, limits, setup)
    if isinstance(jobs, RunResult):
        return jobs
    run_plan = _arrival_plan(scenario, jobs, setup.specs, setup.rng)
    parts, start_ns, server_stats = await _scraped_measure(base_url, url, jobs, run_plan, options, scenario, limits)

    records = sorted((r for p in parts for r in p.records), key=lambda r: r.index)
    summary = _summary(records, parts, start_ns, server_stats, scenario, options, setup)
    result.server_stats = server_stats
    result.summary = RunSummary.model_validate(summary)
    result.client_health = _client_health(parts, records, run_plan, start_ns)
    await _settle_outcome(result, parts, summary, records, limits, base_url)
    if options.out_dir is not None:
        _write(options.out_dir, options.run_id, options.result_file, result, scenario, setup.model, records,
               (warm.records if warm else []), run_plan, options.detailed)
    return result


@dataclass
class _Setup:
    """What a Run makes before any timing: the served model, the prompt factory (and its
    tokenizer), the warmups' jobs and the measured requests' specs (none yet for a
    duration-only run: sized after the warmups)."""

    model: str
    factory: PromptFactory
    tok_source: str
    salt: int
    rng: np.random.Generator  # the scenario's seed: specs, prefix draws and arrivals, in that order
    info: _Prepared
    blocks: TracePrompts | None
    specs: list[RequestSpec]
    warm_jobs: list[client.Job]


async def _prepare(result: RunResult, base_url: str, model: str | None, scenario: Scenario,
                   tokenizer_dir: Path | None, limits: _Limits) -> _Setup | RunResult:
    """The Run's setup, or `result` failed when the server or its /tokenize does not answer."""
    async with server_http.session(limits.api_key, _API_TIMEOUT) as session:
        models_url = base_url + "/v1/models"
        try:
            served = server_http.model_ids(await server_http.aget_json(session, models_url), models_url)
        except server_http.ServerAnswerError as exc:
            state = "unreachable" if exc.status is None else "answered with an error"
            result.outcome, result.error = for_http_status(exc.status), f"server at {base_url} {state}: {exc}"
            return result
        model = model or served[0]
        tok, tok_source = pick_tokenizer(session, base_url, model, tokenizer_dir)
        salt = secrets.randbits(64)
        factory = PromptFactory(tok, seed=scenario.seed, chat=scenario.endpoint == "chat",
                                shared_prefix_len=scenario.shared_prefix.length if scenario.shared_prefix else 0,
                                salt=salt)
        rng = np.random.default_rng(scenario.seed)
        info = _Prepared()
        n_warm = scenario.effective_warmups
        blocks = TracePrompts(factory, salt, scenario.trace.block_tokens) if scenario.trace else None
        try:
            specs, warm_specs = _request_and_warmup_specs(scenario, n_warm, rng)
            warm_jobs = await _make_jobs(factory, scenario, model, warm_specs, rng, -n_warm, True, info)
        except _TOKENIZE_ERRORS as exc:
            return _tokenizing_failed(result, base_url, exc)
        if scenario.endpoint == "chat":
            info.chat_overhead = await factory.chat_overhead()
    return _Setup(model, factory, tok_source, salt, rng, info, blocks, specs, warm_jobs)


def _request_and_warmup_specs(scenario: Scenario, n_warm: int,
                              rng: np.random.Generator) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """The measured requests' specs (empty for a duration-only run) and the warmups'."""
    if scenario.trace is not None:
        specs = trace_specs(scenario)
        return specs, unshared(specs, n_warm)
    if scenario.sweep_input_lens:
        specs = request_specs(scenario, len(scenario.sweep_input_lens), rng)
        return specs, [specs[0]] * n_warm
    warm_specs = request_specs(scenario, n_warm, np.random.default_rng(scenario.seed + 1))
    return request_specs(scenario, scenario.num_prompts or 0, rng), warm_specs


async def _warm_up(url: str, warm_jobs: list[client.Job], scenario: Scenario,
                   limits: _Limits) -> client.DriveResult | None:
    """The warmup requests, all at once up to the scenario's concurrency; None when there are none."""
    if not warm_jobs:
        return None
    return await client.drive(url, warm_jobs, concurrency=scenario.concurrency or max(scenario.effective_warmups, 1),
                              start_ns=time.perf_counter_ns(), **_drive_limits(limits))


async def _measured_jobs(result: RunResult, base_url: str, scenario: Scenario, limits: _Limits,
                         setup: _Setup) -> list[client.Job] | RunResult:
    """The measured requests' jobs, or `result` failed when /tokenize does not answer. A fresh
    session: the first one closed before the warmups."""
    async with server_http.session(limits.api_key, _API_TIMEOUT) as session:
        if isinstance(setup.factory.tok, RemoteTokenizer):
            setup.factory.tok = RemoteTokenizer(session, base_url, setup.model)
        try:
            return await _make_jobs(setup.factory, scenario, setup.model, setup.specs, setup.rng, 0, False,
                                    setup.info, setup.blocks)
        except _TOKENIZE_ERRORS as exc:
            return _tokenizing_failed(result, base_url, exc)


def _arrival_plan(scenario: Scenario, jobs: list[client.Job], specs: list[RequestSpec],
                  rng: np.random.Generator) -> arrivals.Plan:
    """When each job is sent: a trace's own offsets and gaps (sped up), else the scenario's
    rate and burstiness; written into the jobs."""
    if scenario.trace is not None:
        run_plan = arrivals.trace_plan([s.offset_s or 0.0 for s in specs], scenario.trace.speedup,
                                       scenario.concurrency)
        for job, spec in zip(jobs, specs):
            job.gap_ns = int(spec.delay_s / scenario.trace.speedup * 1e9)
    else:
        run_plan = arrivals.plan(scenario, len(jobs), rng)
    if run_plan.offsets is not None:
        for job, off in zip(jobs, run_plan.offsets):
            job.offset_ns = int(off * 1e9)
    return run_plan


async def _scraped_measure(base_url: str, url: str, jobs: list[client.Job], run_plan: arrivals.Plan,
                           options: RunOptions, scenario: Scenario,
                           limits: _Limits) -> tuple[list[client.DriveResult], int, dict[str, Any]]:
    """The measured phase between two scrapes of the server's /metrics: the client processes'
    results, the schedule's origin, and what the server counted meanwhile."""
    scraper = Scraper(base_url, limits.api_key, limits.metric_names)
    await scraper.before()
    try:
        parts, start_ns = await _measure(url, jobs, run_plan.concurrency, options.workers, scenario.duration_s,
                                         options.progress, limits, options.should_stop)
        await scraper.after()
    finally:
        await scraper.close()  # a run cancelled midway (Ctrl-C) leaves no session open
    return parts, start_ns, scraper.result()


def _summary(records: list[RequestRecord], parts: list[client.DriveResult], start_ns: int,
             server_stats: dict[str, Any], scenario: Scenario, options: RunOptions,
             setup: _Setup) -> dict[str, Any]:
    """The measured phase's metrics, with how its prompts were made (and a trace's fidelity)."""
    ends = [r.end_ns for r in records if r.end_ns]
    duration_s = (max(ends) - start_ns) / 1e9 if ends else 0.0
    summary = metrics.summarize(records, duration_s, options.percentiles, options.slo)
    if any(p.stopped_early for p in parts):  # only then: other runs' summaries stay as they were
        summary["stopped_early"] = True
    summary.update({"tokenizer_source": setup.tok_source, "chat_template_tokens": setup.info.chat_overhead,
                    "prompts_inexact": setup.info.inexact, "nonce_salt": f"{setup.salt:016x}"})
    if scenario.sweep_input_lens:
        summary["prefill_sweep"] = sweep.per_size(records)
    if any(s.traffic_class is not None for s in setup.specs):   # a mixed scenario, a trace's request types
        summary["classes"] = classes.class_summaries(records, duration_s, options.percentiles)
    if scenario.trace is not None:
        summary.update(fidelity.trace_fidelity(records, setup.specs, server_stats, scenario.trace,
                                                options.kv_cache_tokens))
    return summary


def _client_health(parts: list[client.DriveResult], records: list[RequestRecord], run_plan: arrivals.Plan,
                   start_ns: int) -> dict[str, Any]:
    """Whether the client kept the schedule, over all its processes (health.assess)."""
    lasts = [p.last_dispatch_ns for p in parts if p.last_dispatch_ns]
    return health.assess(
        loop_lag_ns=[x for p in parts for x in p.loop_lag_ns],
        schedule_delay_ns=[x for p in parts for x in p.schedule_delay_ns],
        cpu_busy=[p.cpu_busy for p in parts], requested_rate=run_plan.rate, sent=len(records),
        start_ns=start_ns,
        last_dispatch_ns=max(lasts, default=None), cap_waits=sum(p.cap_waits for p in parts), workers=len(parts))


async def _settle_outcome(result: RunResult, parts: list[client.DriveResult], summary: dict[str, Any],
                          records: list[RequestRecord], limits: _Limits, base_url: str) -> None:
    """The Run's outcome: client-bound, ended by the client (deadline, stalls), or the server
    crashed or failed every request; else it stays as it is."""
    if result.client_health["client_bound"]:
        result.outcome = Outcome.client_bound
    if not any(p.timed_out for p in parts) and sweep.only_sizes_timed_out(summary):
        return  # a prefill sweep's size that timed out is that size's result; the others were measured
    if any(p.timed_out or p.stalled for p in parts):
        _ended_early(result, parts, limits, base_url, "measured phase")
    elif summary["completed"] == 0 or summary["failed"]:
        if not await _alive(base_url, limits.api_key):
            result.outcome, result.error = Outcome.crashed, f"server at {base_url} stopped answering during the run"
        elif summary["completed"] == 0:
            # A server that fails every request (error status, unreadable stream) measured nothing.
            result.outcome = Outcome.bad_response
            result.error = f"all {len(records)} requests failed: {summary['errors'][:1]}"


# /tokenize failing while prompts are made: RemoteTokenizer raises ServetuneError for an error status
_TOKENIZE_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ServetuneError)


def _tokenizing_failed(result: RunResult, base_url: str, exc: Exception) -> RunResult:
    result.outcome = Outcome.bad_response if isinstance(exc, ServetuneError) else Outcome.crashed
    result.error = f"tokenizing through {base_url} failed: {exc}"
    return result


def _ended_early(result: RunResult, parts: list[client.DriveResult], limits: _Limits, base_url: str,
                 phase: str) -> RunResult:
    """A run the client ended: the deadline passed (in-flight requests cancelled), or streams
    stalled. The server did not crash (its connections stayed open); it stopped serving."""
    sent = sum(len(p.records) for p in parts)
    stalled = sum(p.stalled for p in parts)
    if any(p.timed_out for p in parts):
        cancelled = sum(1 for p in parts for r in p.records if (r.error or "").startswith(client.RUN_TIMEOUT))
        result.outcome = Outcome.run_timeout
        result.error = (f"{phase}: the run's deadline (run_timeout_s) passed with {cancelled} of {sent} "
                        f"requests in flight, cancelled; server at {base_url}")
    else:
        result.outcome = Outcome.stalled
        result.error = (f"{phase}: {stalled} of {sent} requests stalled (no data for "
                        f"{limits.stall_timeout_s:g} s, stall_timeout_s); server at {base_url}")
    return result


def _duration_pool(scenario: Scenario, warm: client.DriveResult | None) -> int:
    assert scenario.duration_s is not None
    if scenario.rate is not None:
        if math.isinf(scenario.rate):
            raise ServetuneError("scenario: rate=inf (all at once) needs num_prompts, not only duration_s")
        return min(int(scenario.rate * scenario.duration_s * 1.2) + 1, _MAX_DURATION_PROMPTS)
    lats = [(r.end_ns - r.dispatch_ns) / 1e9 for r in (warm.records if warm else []) if r.end_ns and r.ok]
    per_slot = scenario.duration_s / max(float(np.median(lats)) if lats else 1.0, 1e-3)
    return min(int(2 * per_slot * (scenario.concurrency or 1)) + (scenario.concurrency or 1), _MAX_DURATION_PROMPTS)


def _write(out_dir: Path, run_id: str, result_name: str, result: RunResult, scenario: Scenario, model: str,
           records: list[RequestRecord], warm: list[RequestRecord], run_plan: arrivals.Plan,
           detailed: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{run_id}.requests.jsonl"
    with jsonl.open("w") as f:
        for r in [*warm, *records]:
            f.write(r.model_dump_json() + "\n")
    result.records_path = str(jsonl)
    doc: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"),
        "backend": "servetune",
        "endpoint_type": "openai-chat" if scenario.endpoint == "chat" else "openai",
        "model_id": model,
        "num_prompts": len(records),
        "request_rate": "inf" if run_plan.rate is None or math.isinf(run_plan.rate) else run_plan.rate,
        "burstiness": scenario.burstiness,
        "max_concurrency": run_plan.concurrency,
        **result.summary.to_dict(),
        **(metrics.per_request_arrays(records) if detailed else {}),
        "scenario": json.loads(scenario.model_dump_json()),
        "outcome": result.outcome.value,
        "error": result.error,
        "server_stats": result.server_stats,
        "client_health": result.client_health,
        "records_path": result.records_path,
    }
    (out_dir / result_name).write_text(json.dumps(doc, indent=1, default=str) + "\n")


def run_scenario(base_url: str, model: str | None, scenario: Scenario,
                 options: RunOptions = RunOptions()) -> RunResult:
    """Measure `scenario` once against the server at `base_url` (sync wrapper).

    `model`: the served model name (None: the server's first). `options`: where the files go,
    the tokenizer, the client processes, the key and the rest (see `RunOptions`).
    A stream silent for the scenario's stall timeout fails as `stalled`; a run past its
    deadline is ended as `run_timeout` (see Scenario.effective_*_timeout_s).
    """
    return client.run(arun_scenario(base_url, model, scenario, options))
