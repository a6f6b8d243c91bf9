"""`servetune capacity`: the highest load one server takes while every latency SLO holds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ..capacity.document import COMPLETE, INTERRUPTED, stored_samples, write_document
from ..capacity.estimate import FIT, CapacityEstimate, estimate
from ..capacity.http import LoadKind
from ..capacity.levels import LevelSample
from ..capacity.search import DEFAULT_MAX_LEVEL, SearchSettings, settings_for
from ..capacity.sequential import LOOKS_PER_RUN
from ..capacity.session import CapacitySession
from ..capacity.slo import Slo, parse_slos, requests_to_meet
from ..engine.served import served
from ..errors import ServetuneError
from ..load.dataset import trace_specs
from ..load.scenario import PRESETS
from ..tune.session import sigterm_as_interrupt
from . import server_options as opt
from . import validate
from .bench_cmd import (
    api_key_from_env,
    build_scenario,
    check_server_choice,
    serve_flags,
)
from .boundary import EXIT_INTERRUPTED, EXIT_NO_RESULT, print_error
from .capacity_view import SearchView, unit
from .paths import companion_dir, output_file, runs_dir_of
from .server_check import check_reachable
from .trace_options import TRACE_HELP, TRACE_SET_HELP, trace_scenario, trace_spec

console = Console()


def capacity_line(est: CapacityEstimate, load: str, alpha: float) -> str:
    if est.capacity == 0:
        return f"capacity: below the lowest level measured ({est.high:g} {unit(load)} violates)"
    high = f"{est.high:.3g}" if math.isfinite(est.high) else "∞ (no level measured violated)"
    by_fit = [end for end, by in (("low", est.low_by), ("high", est.high_by)) if by == FIT]
    return (f"capacity: {est.capacity:.3g} {unit(load)}, {1 - alpha:.0%} interval [{est.low:.3g}, {high}]"
            + (f" ({' and '.join(by_fit)} end from the fitted crossing)" if by_fit else "")
            + (f"; binding SLO {est.binding}" if est.binding else ""))


def capacity(
    scenario: str | None = typer.Option(
        None, "--scenario", help=f"preset: {', '.join(PRESETS)} (with --trace: its endpoint)"),
    trace: Path | None = typer.Option(None, "--trace", help=TRACE_HELP + "; the load is its speed-up"),
    trace_set: list[str] = typer.Option([], "--trace-set", help=TRACE_SET_HELP),
    slo: list[str] = typer.Option(
        ..., "--slo", help="METRIC:STAT=MS, e.g. ttft:p99=1000 (ttft, tpot, itl, e2el; mean, pNN); repeatable"),
    out: Path = typer.Option(..., "--out", help="result JSON, named exactly so, rewritten as each level ends "
                              "(each level's runs beside it: res.json -> res.runs/)"),
    url: opt.Url = None,
    serve: opt.ServeDir = None,
    engine_kind: opt.ServeEngine = "vllm",
    serve_arg: list[str] = typer.Option([], "--serve-arg", help=opt.SERVE_ARG_HELP),
    model: opt.ServedModel = None,
    tokenizer: opt.Tokenizer = None,
    load: str | None = typer.Option(
        None, "--load", help="rate (open loop, req/s; the default), concurrency (closed loop), or speedup "
                             "(of --trace, its default)"),
    start: float | None = typer.Option(
        None, "--start", help="first level tried (default: 0.7 of what a 5 s saturation probe completes; "
                              "with --trace, 1 = the recorded traffic)"),
    max_level: float | None = typer.Option(
        None, "--max-level", help="highest level tried (default 1000 req/s, 1024 users)"),
    num_prompts: int = typer.Option(
        500, "--num-prompts", min=1, help="requests per run (a p99 needs some 400 to be shown under a limit)"),
    input_len: int | None = typer.Option(None, "--input-len", min=1),
    output_len: int | None = typer.Option(None, "--output-len", min=1),
    burstiness: float | None = typer.Option(None, "--burstiness", help="gamma shape of arrivals; 1 = Poisson"),
    endpoint: str | None = typer.Option(None, "--endpoint", help="completions or chat"),
    seed: int | None = typer.Option(None, "--seed"),
    alpha: float = typer.Option(0.05, "--alpha", help="each SLO interval is 1 - alpha"),
    rel_tol: float = typer.Option(0.05, "--rel-tol", help="bisect until the bracket is this narrow"),
    max_levels: int = typer.Option(12, "--max-levels", min=1),
    max_runs: int = typer.Option(3, "--max-runs-per-level", min=1, help="runs pooled at an undecided level"),
    looks_per_run: int = typer.Option(
        LOOKS_PER_RUN, "--looks-per-run", min=1,
        help="looks at a level's verdict per run, its end included; a decided level ends there (1: no early look)"),
    resume: bool = typer.Option(False, "--resume", help="continue the search written to OUT (same SLOs and load)"),
    stall_timeout: float | None = typer.Option(
        None, "--stall-timeout", help="seconds a stream may send nothing (default: from the scenario)"),
    connect_timeout: opt.ConnectTimeout = None,
    first_byte_timeout: opt.FirstByteTimeout = None,
    api_key_env: opt.ApiKeyEnv = None,
    force: opt.Force = False,
    allow_busy: opt.AllowBusy = False,
) -> None:
    """Search the load level: a live table of the levels as they are judged, then the capacity
    with its interval. OUT holds every finished level as it ends; an interrupted search
    (Ctrl-C, SIGTERM) writes its bracket so far, marked "interrupted", and exits 130."""
    url = check_server_choice(url, serve, serve_arg)
    load = load or ("speedup" if trace is not None else "rate")
    _check_options(load, start, max_level, input_len, output_len, num_prompts, burstiness, seed,
                   {"--stall-timeout": stall_timeout, "--connect-timeout": connect_timeout,
                    "--first-byte-timeout": first_byte_timeout})
    _check_search(load, trace, scenario, alpha, rel_tol)
    slos = parse_slos(slo)
    if trace is not None:
        sc = trace_scenario(scenario, trace_spec(trace, trace_set), endpoint=endpoint, seed=seed)
        num_prompts = len(trace_specs(sc))  # a level replays the whole window
        start = 1.0 if start is None else start  # the recorded traffic: no probe for a trace
    else:
        assert scenario is not None
        sc = build_scenario(scenario, input_len=input_len, output_len=output_len, burstiness=burstiness,
                            endpoint=endpoint, seed=seed, rate=1.0 if load == "rate" else None,
                            stall_timeout_s=stall_timeout)
    settings = _settings(load, start, max_level, alpha, rel_tol, max_levels, max_runs, looks_per_run)
    per_level = f"--num-prompts {num_prompts}" if trace is None else f"the trace's {num_prompts} requests"
    _check_requests_per_level(slos, num_prompts, settings, per_level)
    tokenizer = validate.tokenizer_dir(tokenizer)
    api_key = api_key_from_env(api_key_env) if api_key_env is not None or url is not None else None
    kind: LoadKind = "concurrency" if load == "concurrency" else "rate" if load == "rate" else "speedup"
    stored: list[LevelSample] = []
    previous: dict[str, Any] = {}
    if resume:
        previous, stored = stored_samples(out, kind, slos)
    # OUT and OUT.runs/ checked before the first level (a resumed search writes on over its own).
    output_file(out, "--out", force or resume, "JSON", [trace])
    runs_dir = companion_dir(runs_dir_of(out), "--out", force or resume)
    search_start: dict[str, Any] = {"start": previous.get("start"), "probe": previous.get("probe")}
    view = SearchView(console, load, integer=kind == "concurrency", alpha=alpha)
    run = CapacitySession(out, sc, slos, settings, load, kind, {"url": url, "serve": str(serve) if serve else None},
                  num_prompts, start, model, runs_dir, stored, view, search_start)
    status = COMPLETE
    try:
        with sigterm_as_interrupt(), view:
            if serve is not None:
                with served(serve, serve_flags(serve_arg), runs_dir / "logs", "capacity", api_key,
                            allow_busy, console.print, engine_kind) as (base_url, key, kv_tokens):
                    run.run_search(base_url, key, tokenizer or serve, kv_tokens)
            else:
                assert url is not None
                check_reachable(url, api_key, console, connect_timeout_s=connect_timeout,
                                first_byte_timeout_s=first_byte_timeout)
                run.run_search(url, api_key, tokenizer)
    except KeyboardInterrupt:
        status = INTERRUPTED
    _conclude(run, status, alpha)


def _check_search(load: str, trace: Path | None, scenario: str | None, alpha: float, rel_tol: float) -> None:
    """The search's own options, refused before any request (bad input, exit 2)."""
    if load not in DEFAULT_MAX_LEVEL:
        raise ServetuneError(f"--load {load!r}: expected rate, concurrency or speedup")
    if (load == "speedup") != (trace is not None):
        raise ServetuneError("--load speedup goes with --trace FILE, and a trace's load is its speed-up")
    if trace is None and scenario is None:
        raise ServetuneError("give --scenario PRESET or --trace FILE")
    if not 0 < alpha < 1:
        raise ServetuneError(f"--alpha {alpha:g}: must be between 0 and 1")
    if not 0 < rel_tol < 1:
        raise ServetuneError(f"--rel-tol {rel_tol:g}: must be between 0 and 1")


def _conclude(run: CapacitySession, status: str, alpha: float) -> None:
    """OUT written with the search's end (or nothing, when no level ended), the capacity printed,
    and the exit code: 130 interrupted, 1 no level or a server failure that ended the search."""
    result, out = run.result, run.out
    if not result.levels:
        why = ("interrupted before a level ended" if status == INTERRUPTED
               else result.error or "no level was measured")
        print_error(f"{why}; nothing written to {out}")
        raise typer.Exit(EXIT_INTERRUPTED if status == INTERRUPTED else EXIT_NO_RESULT)
    est = estimate(result.levels, integer=run.kind == "concurrency", alpha=alpha)
    write_document(out, run.document(status))
    console.print(escape(capacity_line(est, run.load, alpha)))
    probed = (run.search_start["probe"] or {}).get("requests")
    in_probe = f" (and {probed} in the probe)" if probed else ""
    console.print(f"{len(result.levels)} levels, {result.requests} requests{in_probe}, "
                  f"{result.seconds / 60:.1f} min measuring")
    if result.error:
        console.print(f"[red]error:[/] {escape(result.error)}")
    if status == INTERRUPTED:
        console.print(escape(f"interrupted: wrote the bracket so far to {out}; continue with --resume"))
        raise typer.Exit(EXIT_INTERRUPTED)
    console.print(escape(f"wrote {out} and the runs under {run.runs_dir}"))
    if result.error:  # a search a server failure ended (its error said above) is no capacity: exit 1
        print_error(f"{result.error}; the search did not finish, so the capacity above is not a result "
                    "(the levels measured are kept)")
        raise typer.Exit(EXIT_NO_RESULT)


def register(app: typer.Typer) -> None:
    app.command("capacity")(capacity)


def _check_options(load: str, start: float | None, max_level: float | None, input_len: int | None,
                   output_len: int | None, num_prompts: int, burstiness: float | None, seed: int | None,
                   timeouts: dict[str, float | None]) -> None:
    """The numbers `capacity` takes, refused before any request (bad input, exit 2)."""
    validate.load_options({"--input-len": input_len, "--output-len": output_len, "--num-prompts": num_prompts,
                           "--burstiness": burstiness, "--seed": seed, **timeouts})
    if load == "concurrency":  # a closed loop runs whole users: 1.5 is not rounded silently
        for option, level in (("--start", start), ("--max-level", max_level)):
            if level is not None and math.isfinite(level) and level != int(level):
                raise ServetuneError(f"{option} {level:g}: --load concurrency takes a whole number of users")


def _check_requests_per_level(slos: list[Slo], num_prompts: int, settings: SearchSettings, what: str) -> None:
    """Refused before any request: with fewer, no level's planned look could show the percentile met."""
    for one in slos:
        needed = requests_to_meet(one, settings.looks.planned_alpha)
        if needed is not None and needed > num_prompts:
            raise ServetuneError(f"{what} cannot show {one} met at alpha {settings.alpha:g}: "
                                 f"a level needs at least {needed} (or judge a lower percentile, or a longer window)")


def _settings(load: str, start: float | None, max_level: float | None, alpha: float, rel_tol: float,
              max_levels: int, max_runs: int, looks_per_run: int) -> SearchSettings:
    lowest = 1.0 if load == "concurrency" else 1e-3
    top = DEFAULT_MAX_LEVEL[load] if max_level is None else max_level
    first = 1.0 if start is None else start
    for option, value in (("--start", first), ("--max-level", top)):
        if not math.isfinite(value) or value < lowest:
            raise ServetuneError(f"{option} {value:g}: must be a finite level of at least {lowest:g}")
    if first > top:
        raise ServetuneError(f"--start {first:g} is above --max-level {top:g}")
    return settings_for(load, start=first, max_level=top, alpha=alpha, rel_tol=rel_tol, max_levels=max_levels,
                        max_runs_per_level=max_runs, looks_per_run=looks_per_run)
