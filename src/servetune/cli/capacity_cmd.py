"""`servetune capacity`: the highest load one server takes while every latency SLO holds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..capacity.document import capacity_document
from ..capacity.estimate import CapacityEstimate, estimate
from ..capacity.http import LoadKind, http_measure
from ..capacity.search import DEFAULT_MAX_LEVEL, SearchResult, SearchSettings, search, settings_for
from ..capacity.slo import Judgement, Slo, parse_slos, requests_to_meet
from ..errors import ServetuneError
from ..load.dataset import trace_specs
from ..load.scenario import PRESETS
from . import validate
from .bench_cmd import (
    API_KEY_ENV_HELP,
    FORCE_HELP,
    SERVE_ARG_HELP,
    TOKENIZER_HELP,
    api_key_from_env,
    build_scenario,
    check_server_choice,
    served,
)
from .boundary import EXIT_NO_RESULT, on_interrupt, print_error
from .paths import companion_dir, result_file, runs_dir_of
from .server_check import CONNECT_HELP, FIRST_BYTE_HELP, check_reachable
from .trace_options import TRACE_HELP, TRACE_SET_HELP, trace_scenario, trace_spec

console = Console()


def _unit(load: str) -> str:
    return {"rate": "req/s", "speedup": "x the recorded traffic"}.get(load, "concurrent requests")


def _cell(j: Judgement) -> str:
    high = f"{j.high:.1f}" if math.isfinite(j.high) else "∞"
    low = f"{j.low:.1f}" if math.isfinite(j.low) else "-∞"
    return f"{j.estimate:.1f} [{low}, {high}] {j.verdict.value}"


def levels_table(result: SearchResult, slos: list[Slo], load: str) -> Table:
    """One row per level measured, in level order: requests, each SLO's statistic with its interval."""
    table = Table(title=escape(f"load levels ({_unit(load)}); per SLO: estimate [interval] in ms, verdict"),
                  show_header=True)
    table.add_column(load, justify="right")
    table.add_column("runs", justify="right")
    table.add_column("requests", justify="right")
    for s in slos:
        table.add_column(str(s), justify="right")
    table.add_column("verdict")
    for r in sorted(result.levels, key=lambda r: r.level):
        verdict = r.verdict.value + (f" (stopped: {r.stopped})" if r.stopped else "")
        table.add_row(f"{r.level:g}", str(len(r.samples)), f"{r.completed}/{r.requests}",
                      *(escape(_cell(j)) for j in r.judgements), escape(verdict))
    return table


def capacity_line(est: CapacityEstimate, load: str, alpha: float) -> str:
    if est.capacity == 0:
        return f"capacity: below the lowest level measured ({est.high:g} {_unit(load)} violates)"
    high = f"{est.high:.3g}" if math.isfinite(est.high) else "∞ (no level measured violated)"
    return (f"capacity: {est.capacity:.3g} {_unit(load)}, {1 - alpha:.0%} interval [{est.low:.3g}, {high}]"
            + (f"; binding SLO {est.binding}" if est.binding else ""))


def register(app: typer.Typer) -> None:
    @app.command("capacity")
    def capacity(
        scenario: str | None = typer.Option(
            None, "--scenario", help=f"preset: {', '.join(PRESETS)} (with --trace: its endpoint)"),
        trace: Path | None = typer.Option(None, "--trace", help=TRACE_HELP + "; the load is its speed-up"),
        trace_set: list[str] = typer.Option([], "--trace-set", help=TRACE_SET_HELP),
        slo: list[str] = typer.Option(
            ..., "--slo", help="METRIC:STAT=MS, e.g. ttft:p99=1000 (ttft, tpot, itl, e2el; mean, pNN); repeatable"),
        out: Path = typer.Option(..., "--out", help="result JSON, named exactly so "
                                  "(each level's runs beside it: res.json -> res.runs/)"),
        url: str | None = typer.Option(None, "--url", help="base URL of a running OpenAI-compatible server"),
        serve: Path | None = typer.Option(None, "--serve", help="launch vLLM on this model directory first"),
        serve_arg: list[str] = typer.Option([], "--serve-arg", help=SERVE_ARG_HELP),
        model: str | None = typer.Option(None, "--model", help="served model name (default: the server's first)"),
        tokenizer: Path | None = typer.Option(None, "--tokenizer", help=TOKENIZER_HELP),
        load: str | None = typer.Option(
            None, "--load", help="rate (open loop, req/s; the default), concurrency (closed loop), or speedup "
                                 "(of --trace, its default)"),
        start: float | None = typer.Option(None, "--start", help="first level tried (default 1)"),
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
        stall_timeout: float | None = typer.Option(
            None, "--stall-timeout", help="seconds a stream may send nothing (default: from the scenario)"),
        connect_timeout: float | None = typer.Option(None, "--connect-timeout", help=CONNECT_HELP),
        first_byte_timeout: float | None = typer.Option(None, "--first-byte-timeout", help=FIRST_BYTE_HELP),
        api_key_env: str | None = typer.Option(None, "--api-key-env", help=API_KEY_ENV_HELP),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Search the load level: prints the capacity with its interval and the levels measured."""
        url = check_server_choice(url, serve, serve_arg)
        load = load or ("speedup" if trace is not None else "rate")
        _check_options(load, start, max_level, input_len, output_len, num_prompts, burstiness, seed,
                       {"--stall-timeout": stall_timeout, "--connect-timeout": connect_timeout,
                        "--first-byte-timeout": first_byte_timeout})
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
        slos = parse_slos(slo)
        if trace is not None:
            sc = trace_scenario(scenario, trace_spec(trace, trace_set), endpoint=endpoint, seed=seed)
            num_prompts = len(trace_specs(sc))  # a level replays the whole window
        else:
            assert scenario is not None
            sc = build_scenario(scenario, input_len=input_len, output_len=output_len, burstiness=burstiness,
                                endpoint=endpoint, seed=seed, rate=1.0 if load == "rate" else None,
                                stall_timeout_s=stall_timeout)
        per_level = f"--num-prompts {num_prompts}" if trace is None else f"the trace's {num_prompts} requests"
        _check_requests_per_level(slos, num_prompts, alpha, per_level)
        settings = _settings(load, start, max_level, alpha, rel_tol, max_levels, max_runs)
        tokenizer = validate.tokenizer_dir(tokenizer)
        api_key = api_key_from_env(api_key_env) if api_key_env is not None or url is not None else None
        runs_dir = _check_outputs(out, force)
        kind: LoadKind = "concurrency" if load == "concurrency" else "rate" if load == "rate" else "speedup"

        def announce(level: float, run: int) -> None:
            console.print(escape(f"run {run + 1}: {load} {level:g} ..."))

        def run_search(base_url: str, key: str | None, tok: Path | None) -> SearchResult:
            measure = http_measure(base_url, sc, slos, load=kind, num_prompts=num_prompts, alpha=alpha,
                                   out_dir=runs_dir, model=model, tokenizer_dir=tok, api_key=key, on_level=announce)
            return search(measure, slos, settings)

        if serve is not None:
            with served(serve, serve_arg, runs_dir / "logs", "capacity", api_key) as (base_url, key):
                result = run_search(base_url, key, tokenizer or serve)
        else:
            assert url is not None
            check_reachable(url, api_key, console, connect_timeout_s=connect_timeout,
                            first_byte_timeout_s=first_byte_timeout)
            result = run_search(url, api_key, tokenizer)
        if not result.levels:
            print_error(f"{result.error or 'no level was measured'}; nothing written to {out}")
            raise typer.Exit(EXIT_NO_RESULT)
        est = estimate(result.levels, integer=kind == "concurrency")
        console.print(levels_table(result, slos, load))
        console.print(escape(capacity_line(est, load, alpha)))
        console.print(f"{len(result.levels)} levels, {result.requests} requests")
        if result.error:
            console.print(f"[red]error:[/] {escape(result.error)}")
        doc = capacity_document(result, est, slos, settings, load,
                                {"url": url, "serve": str(serve) if serve else None,
                                 "scenario": json.loads(sc.model_dump_json()), "num_prompts": num_prompts})
        out.write_text(json.dumps(doc, indent=1) + "\n")
        console.print(escape(f"wrote {out} and the runs under {runs_dir}"))
        _exit_if_search_failed(result)


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


def _check_outputs(out: Path, force: bool) -> Path:
    """OUT and OUT.runs/ checked before the first level: a bad path must not cost the measurements."""
    result_file(out, "--out", force)
    runs_dir = companion_dir(runs_dir_of(out), "--out", force)
    on_interrupt(f"nothing written to {out}; the runs measured so far are kept under {runs_dir}")
    return runs_dir


def _exit_if_search_failed(result: SearchResult) -> None:
    """A search a server failure ended (its error said above) is no capacity: exit 1, the levels kept."""
    if result.error:
        print_error(f"{result.error}; the search did not finish, so the capacity above is not a result "
                    "(the levels measured are kept)")
        raise typer.Exit(EXIT_NO_RESULT)


def _check_requests_per_level(slos: list[Slo], num_prompts: int, alpha: float, what: str) -> None:
    """Refused before any request: with fewer, no level could be shown to meet the percentile."""
    for one in slos:
        needed = requests_to_meet(one, alpha)
        if needed is not None and needed > num_prompts:
            raise ServetuneError(f"{what} cannot show {one} met at alpha {alpha:g}: "
                                 f"a level needs at least {needed} (or judge a lower percentile, or a longer window)")


def _settings(load: str, start: float | None, max_level: float | None, alpha: float, rel_tol: float,
              max_levels: int, max_runs: int) -> SearchSettings:
    lowest = 1.0 if load == "concurrency" else 1e-3
    top = DEFAULT_MAX_LEVEL[load] if max_level is None else max_level
    first = 1.0 if start is None else start
    for option, value in (("--start", first), ("--max-level", top)):
        if not math.isfinite(value) or value < lowest:
            raise ServetuneError(f"{option} {value:g}: must be a finite level of at least {lowest:g}")
    if first > top:
        raise ServetuneError(f"--start {first:g} is above --max-level {top:g}")
    return settings_for(load, start=first, max_level=top, alpha=alpha, rel_tol=rel_tol, max_levels=max_levels,
                        max_runs_per_level=max_runs)
