"""`servetune bench`: measure one Scenario against a running server (or one it launches)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..engine.served import served
from ..errors import ServetuneError
from ..load.bench import run_scenario
from ..load.metrics import SLO_NAMES, percentile_key
from ..load.options import RunOptions
from ..load.records import RunResult, RunSummary
from ..load.scenario import PRESETS, Scenario, preset
from ..vocabulary import Outcome
from . import server_options as opt
from . import validate
from .boundary import EXIT_NO_RESULT, on_interrupt, print_error, validation_text
from .paths import output_file
from .server_check import check_reachable
from .trace_options import TRACE_HELP, TRACE_SET_HELP, trace_scenario, trace_spec
from .waiting import Silence, SilenceColumn

console = Console()
# Scenario fields as the options that set them, so a bad value is reported in the user's words.
OPTION_OF_FIELD = {"input_len": "--input-len", "output_len": "--output-len", "concurrency": "--concurrency",
                   "rate": "--rate", "burstiness": "--burstiness", "num_prompts": "--num-prompts",
                   "duration_s": "--duration", "warmups": "--warmups", "seed": "--seed", "endpoint": "--endpoint"}


def parse_slo(items: list[str]) -> dict[str, float]:
    """["ttft=500", "tpot=50"] -> {"ttft": 500.0, "tpot": 50.0} (milliseconds)."""
    slo: dict[str, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq:
            name, eq, value = item.partition(":")  # vLLM's spelling
        name = name.strip().lower()
        if not eq or name not in SLO_NAMES:
            raise ServetuneError(f"--slo {item!r}: expected NAME=MS with NAME one of {', '.join(SLO_NAMES)}")
        try:
            slo[name] = float(value)
        except ValueError:
            raise ServetuneError(f"--slo {item!r}: {value!r} is not a number of milliseconds") from None
        if not math.isfinite(slo[name]) or slo[name] <= 0:  # as `capacity` judges: 0 ms no request meets
            raise ServetuneError(f"--slo {item!r}: must be a finite number of milliseconds above 0")
    return slo


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ServetuneError(f"--percentiles {text!r}: expected numbers separated by commas") from None
    if not values or any(not 0 < p <= 100 for p in values):
        raise ServetuneError(f"--percentiles {text!r}: each must be in (0, 100]")
    return values


MAX_WORKERS = 256


def check_server_choice(url: str | None, serve: Path | None, serve_arg: list[str]) -> str | None:
    """A command measures either a running server (--url, returned checked) or one it launches (--serve)."""
    if (url is None) == (serve is None):
        raise ServetuneError("give exactly one of --url (a running server) or --serve MODEL_DIR")
    if serve_arg and serve is None:
        raise ServetuneError("--serve-arg needs --serve")
    if serve is not None:
        if not serve.is_dir():
            raise ServetuneError(f"--serve {serve}: not a directory")
        serve_flags(serve_arg)
    return None if url is None else validate.url(url)


def serve_flags(serve_args: list[str]) -> dict[str, Any]:
    """--serve-arg values as engine flags; an unbalanced quote is bad input, not a traceback."""
    from .serve_cmd import flags_from_argv

    return flags_from_argv([a for arg in serve_args for a in (validate.command(arg, "--serve-arg") or [])])


def api_key_from_env(name: str | None) -> str | None:
    """The value of environment variable `name` (None: the first of opt.DEFAULT_KEY_VARIABLES
    that is set). The key is only ever passed to the client; messages name the variable."""
    if name is None:
        return next((os.environ[n] for n in opt.DEFAULT_KEY_VARIABLES if os.environ.get(n)), None)
    key = os.environ.get(name)
    if not key:
        raise ServetuneError(f"--api-key-env {name}: no variable {name!r} (or an empty one) in the environment")
    return key


def build_scenario(name: str, **overrides: Any) -> Scenario:
    if name not in PRESETS:
        raise ServetuneError(f"unknown scenario {name!r}; presets: {', '.join(PRESETS)}")
    rate = overrides.get("rate")
    try:
        sc = preset(name, **overrides)
        if rate is not None and overrides.get("concurrency") is None:
            sc = Scenario.model_validate({**sc.model_dump(), "concurrency": None})  # open loop, uncapped
    except ValidationError as exc:
        raise ServetuneError(f"scenario {name!r}: {validation_text(exc, OPTION_OF_FIELD)}") from None
    return sc


def summary_table(result: RunResult, percentiles: tuple[float, ...]) -> Table:
    s = result.summary
    table = Table(title=f"{result.scenario}: {result.outcome.value}", show_header=True)
    table.add_column("metric")
    for col in ("mean", "median", *(f"p{percentile_key(p)}" for p in percentiles)):
        table.add_column(col, justify="right")
    for name, label in (("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"), ("itl", "ITL (ms)"), ("e2el", "E2EL (ms)"),
                        ("itl_per_token", "ITL per token (ms)"), ("e2el_from_scheduled", "E2EL from arrival (ms)")):
        cells = [s.get(f"mean_{name}_ms"), s.get(f"median_{name}_ms"),
                 *(s.get(f"p{percentile_key(p)}_{name}_ms") for p in percentiles)]
        table.add_row(label, *(f"{c:.2f}" if isinstance(c, float) else "-" for c in cells))
    return table


def _pair(a: float | None, b: float | None) -> str | None:
    return None if a is None or b is None else f"{a:.2f} / {b:.2f}"


def totals_table(result: RunResult) -> Table:
    s, h, srv = result.summary, result.client_health, result.server_stats
    table = Table(show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [
        ("completed / failed", f"{s.get('completed')} / {s.get('failed')}"),
        ("duration (s)", s.get("duration")),
        ("input / output tokens", f"{s.get('total_input_tokens')} / {s.get('total_output_tokens')}"),
        ("request throughput (req/s)", s.get("request_throughput")),
        ("output throughput (tok/s)", s.get("output_throughput")),
        ("total token throughput (tok/s)", s.get("total_token_throughput")),
        ("request goodput (req/s) [95 % interval]", _goodput(s)),
        ("prompt tokens off target", f"{s.get('prompt_tokens_mismatched')} of {s.get('prompt_tokens_checked')}"),
        # The engine's own clock (from its arrival of a request): what the client adds is HTTP and itself.
        ("server: mean TTFT / E2EL (ms)", _pair(srv.get("server_ttft_mean_ms"), srv.get("server_e2el_mean_ms"))),
        ("server: mean queue time (ms)", srv.get("server_queue_mean_ms")),
        ("server: preemptions", srv.get("preemptions")),
        ("server: prefix cache hits / queries", f"{srv.get('prefix_cache_hits')} / {srv.get('prefix_cache_queries')}"),
        ("server: peak KV cache usage", srv.get("peak_kv_cache_usage")),
        ("server: peak running / waiting", f"{srv.get('peak_running')} / {srv.get('peak_waiting')}"),
        ("client: loop lag p99 (ms)", h.get("loop_lag_ms", {}).get("p99")),
        ("client: schedule delay p99 (ms)", h.get("schedule_delay_ms", {}).get("p99")),
        ("client: CPU busy", ", ".join(f"{c:.0%}" for c in h.get("cpu_busy", []))),
    ]
    for what, value in rows:
        if value is None:
            continue
        table.add_row(what, f"{value:.2f}" if isinstance(value, float) else str(value))
    return table


def _goodput(s: RunSummary) -> str | None:
    """`9.00 [8.51, 9.38]`: the run's goodput with its interval (stats.intervals.goodput_ci)."""
    value, low, high = s.get("request_goodput"), s.get("request_goodput_low"), s.get("request_goodput_high")
    if value is None:
        return None
    return f"{value:.2f}" if low is None or high is None else f"{value:.2f} [{low:.2f}, {high:.2f}]"


def _rate(value: float | None) -> str | None:
    return None if value is None else f"{value:.1%}"


def _pool_rate(s: RunSummary) -> str:
    """The hit rate the server's KV pool implies; '-' and why where there is none."""
    if "prefix_hit_rate_pool" not in s:
        return "- (KV pool unknown)"   # a server servetune did not boot: no boot log
    return _rate(s.get("prefix_hit_rate_pool")) or "- (pool full)"


def sweep_table(s: RunSummary) -> Table:
    """The prefill sweep per prompt size: TTFT and prefill tokens/s, or that the size timed out."""
    table = Table(title="prefill sweep")
    for name in ("prompt tokens", "TTFT (ms)", "prefill tok/s", "outcome"):
        table.add_column(name, justify="right")
    for size in s.get("prefill_sweep") or []:
        ttft, rate = size.get("ttft_ms"), size.get("prefill_tok_s")
        table.add_row(f"{size.get('prompt_tokens') or size['input_len']:,}", "-" if ttft is None else f"{ttft:,.0f}",
                      "-" if rate is None else f"{rate:,.0f}", escape(str(size["outcome"])))
    return table


def fidelity_table(s: RunSummary) -> Table:
    """How faithfully a trace was replayed: send lateness, lengths as asked, prefix reuse."""
    table = Table(title="trace replay fidelity", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    late = [s.get(f"send_lateness_{k}_ms") for k in ("p50", "p99", "max")]
    rows = [
        ("requests replayed (speed-up)", f"{s.get('trace_requests')} ({s.get('trace_speedup')}x)"),
        ("send lateness p50 / p99 / max (ms)", " / ".join("-" if v is None else f"{v:.2f}" for v in late)),
        ("prompts off their token count", f"{s.get('prompt_tokens_mismatched')} of {s.get('prompt_tokens_checked')}"),
        ("answers off their token count", f"{s.get('output_tokens_mismatched')} of {s.get('output_tokens_checked')}"),
        ("prefix-cache hit rate: implied / measured",
         f"{_rate(s.get('prefix_hit_rate_implied')) or '-'} / {_rate(s.get('prefix_hit_rate_measured')) or '-'}"),
        ("prefix-cache hit rate with this KV pool", _pool_rate(s)),
    ]
    for what, value in rows:
        table.add_row(what, value)
    return table


def bench(
    scenario: str | None = typer.Option(
        None, "--scenario", help=f"preset: {', '.join(PRESETS)} (with --trace: its endpoint)"),
    out: Path = typer.Option(..., "--out", help="result JSON, named exactly so "
                              "(per-request JSONL beside it: NAME.requests.jsonl)"),
    trace: Path | None = typer.Option(None, "--trace", help=TRACE_HELP),
    trace_set: list[str] = typer.Option([], "--trace-set", help=TRACE_SET_HELP),
    speedup: float = typer.Option(1.0, "--speedup", help="--trace: replay this many times as fast"),
    url: opt.Url = None,
    serve: opt.ServeDir = None,
    engine_kind: opt.ServeEngine = "vllm",
    serve_arg: list[str] = typer.Option([], "--serve-arg", help=opt.SERVE_ARG_HELP),
    model: opt.ServedModel = None,
    tokenizer: opt.Tokenizer = None,
    input_len: int | None = typer.Option(None, "--input-len", min=1),
    output_len: int | None = typer.Option(None, "--output-len", min=1),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1),
    rate: float | None = typer.Option(None, "--rate", help="req/s, open loop ('inf': all at once)"),
    burstiness: float | None = typer.Option(None, "--burstiness", help="gamma shape; 1 = Poisson"),
    num_prompts: int | None = typer.Option(None, "--num-prompts", min=1),
    duration: float | None = typer.Option(None, "--duration", help="seconds (instead of or capping --num-prompts)"),
    warmups: int | None = typer.Option(None, "--warmups", min=0),
    seed: int | None = typer.Option(None, "--seed"),
    endpoint: str | None = typer.Option(None, "--endpoint", help="completions or chat"),
    slo: list[str] = typer.Option([], "--slo", help="goodput SLO NAME=MS (ttft, tpot, e2el); repeatable"),
    percentiles: str = typer.Option("50,90,95,99", "--percentiles"),
    workers: int = typer.Option(1, "--workers", min=1, help="client processes"),
    stall_timeout: float | None = typer.Option(
        None, "--stall-timeout", help="seconds a stream may send nothing (default: from the scenario)"),
    run_timeout: float | None = typer.Option(
        None, "--run-timeout", help="seconds the whole run may take (default: from the scenario)"),
    connect_timeout: opt.ConnectTimeout = None,
    first_byte_timeout: opt.FirstByteTimeout = None,
    api_key_env: opt.ApiKeyEnv = None,
    force: opt.Force = False,
    allow_busy: opt.AllowBusy = False,
) -> None:
    """Measure one scenario; prints a summary and writes vllm-bench-compatible JSON."""
    url = check_server_choice(url, serve, serve_arg)
    validate.load_options({"--input-len": input_len, "--output-len": output_len, "--concurrency": concurrency,
                           "--rate": rate, "--burstiness": burstiness, "--num-prompts": num_prompts,
                           "--duration": duration, "--warmups": warmups, "--seed": seed,
                           "--stall-timeout": stall_timeout, "--run-timeout": run_timeout,
                           "--connect-timeout": connect_timeout, "--first-byte-timeout": first_byte_timeout})
    validate.count(workers, "--workers", high=MAX_WORKERS)
    slo_ms = parse_slo(slo)
    pcts = parse_percentiles(percentiles)
    if trace is not None:
        sc = trace_scenario(scenario, trace_spec(trace, trace_set, speedup), concurrency=concurrency,
                            num_prompts=num_prompts, warmups=warmups, seed=seed, endpoint=endpoint,
                            stall_timeout_s=stall_timeout, run_timeout_s=run_timeout)
    elif scenario is None:
        raise ServetuneError("give --scenario PRESET or --trace FILE")
    else:
        sc = build_scenario(scenario, input_len=input_len, output_len=output_len, concurrency=concurrency,
                            rate=rate, burstiness=burstiness, num_prompts=num_prompts, duration_s=duration,
                            warmups=warmups, seed=seed, endpoint=endpoint, stall_timeout_s=stall_timeout,
                            run_timeout_s=run_timeout)
    tokenizer = validate.tokenizer_dir(tokenizer)
    api_key = api_key_from_env(api_key_env) if api_key_env is not None or url is not None else None
    # Now, not after the run: a late failure would lose the measurements. Named exactly as given.
    run_id = out.name.removesuffix(".json")
    output_file(out, "--out", force, "JSON", [trace])
    output_file(out.with_name(f"{run_id}.requests.jsonl"), "--out (its per-request JSONL)", force, "JSON lines",
                [trace])
    on_interrupt(f"nothing written to {out}")
    if url is not None:
        check_reachable(url, api_key, console, connect_timeout_s=connect_timeout,
                        first_byte_timeout_s=first_byte_timeout)
        result = _bench(url, model, sc, tokenizer, out, run_id, slo_ms, pcts, workers, api_key)
    else:
        assert serve is not None
        result = _bench_served(serve, serve_arg, sc, out, run_id, slo_ms, pcts, workers, tokenizer, api_key,
                               allow_busy, engine_kind)
    _show_result(result, sc, pcts, out)

def _show_result(result: RunResult, sc: Scenario, pcts: tuple[float, ...], out: Path) -> None:
    """The run's tables and where it was written; exit 1 when there is no result to show."""
    if result.records_path is None:  # the run never reached the measurement: nothing was written
        print_error(f"{result.error or result.outcome.value}; nothing written to {out}")
        raise typer.Exit(EXIT_NO_RESULT)
    console.print(summary_table(result, pcts))
    console.print(totals_table(result))
    if result.summary.get("prefill_sweep"):
        console.print(sweep_table(result.summary))
    if sc.trace is not None:
        console.print(fidelity_table(result.summary))
    if result.client_health.get("reasons"):
        console.print("[yellow]client-bound:[/] " + escape("; ".join(result.client_health["reasons"])))
    if result.error:
        console.print(f"[red]error:[/] {escape(result.error)}")
    if result.outcome.is_failure and result.outcome is not Outcome.client_bound:
        # Kept, marked with its outcome (compare refuses it); not presented as a result.
        console.print(escape(f"the run failed ({result.outcome.value}): kept for inspection in {out} and "
                             f"{result.records_path}; not a result"))
        raise typer.Exit(EXIT_NO_RESULT)
    console.print(escape(f"wrote {out} and {result.records_path}"))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def _bench(url: str, model: str | None, sc: Scenario, tokenizer: Path | None, out: Path, run_id: str,
           slo: dict[str, float], pcts: tuple[float, ...], workers: int, api_key: str | None,
           kv_cache_tokens: int | None = None) -> RunResult:
    total = len(sc.sweep_input_lens) if sc.sweep_input_lens else (sc.num_prompts or 0)
    silence = Silence(sc.effective_stall_timeout_s, sc.effective_run_timeout_s)
    with Progress(TextColumn(f"[bold]{sc.name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  SilenceColumn(silence), console=console, transient=True) as bar:
        task = bar.add_task("requests", total=total or None)

        def progress(done: int, n: int) -> None:
            silence.heard()
            bar.update(task, completed=done, total=n)

        return run_scenario(url, model, sc, RunOptions(tokenizer_dir=tokenizer, out_dir=out.parent, run_id=run_id,
                            slo=slo or None, percentiles=pcts, progress=progress, workers=workers, api_key=api_key,
                            result_name=out.name, kv_cache_tokens=kv_cache_tokens))


def _bench_served(model_dir: Path, serve_args: list[str], sc: Scenario, out: Path, run_id: str,
                  slo: dict[str, float], pcts: tuple[float, ...], workers: int, tokenizer: Path | None,
                  api_key: str | None, allow_busy: bool, engine_kind: str) -> RunResult:
    """`api_key`: from --api-key-env; None: the key the launched server itself uses, if any."""
    with served(model_dir, serve_flags(serve_args), out.parent / "logs", run_id, api_key, allow_busy,
                console.print, engine_kind) as (url, key, kv_tokens):
        return _bench(url, None, sc, tokenizer or model_dir, out, run_id, slo, pcts, workers, key, kv_tokens)
