"""`servetune drift`: the regression protocol against one server, with a verdict."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import partial
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..drift.analysis import DriftAnalysis, analyze
from ..drift.measure import DriftRun, run_protocol
from ..drift.protocol import DriftProtocol, Phase
from ..engine.served import served
from ..errors import ServetuneError
from . import server_options as opt
from . import validate
from .bench_cmd import api_key_from_env, check_server_choice, serve_flags
from .boundary import EXIT_NO_RESULT, on_interrupt, print_error, validation_text
from .paths import companion_dir, output_file, runs_dir_of
from .server_check import check_reachable
from .waiting import Silence

console = Console()
_OPTION_OF_FIELD = {"stall_timeout_s": "--stall-timeout", "short_per_phase": "--short-per-phase",
                    "long_requests": "--long-requests",
                    "short_input_len": "--short-input-len", "short_output_len": "--short-output-len",
                    "long_input_len": "--long-input-len", "long_output_len": "--long-output-len",
                    "warmups": "--warmups"}


def _ci(low: float, high: float) -> str:
    return f"[{low:+.1f}, {high:+.1f}]"


def phases_table(analysis: DriftAnalysis) -> Table:
    """One row per short phase: geometric-mean TTFT and TPOT (ms) with CIs, and the change from
    the first phase with its CI and verdict."""
    table = Table(title=f"short requests per phase: geometric mean (ms) [{1 - analysis.alpha:.0%} CI]; "
                        "change from the first phase", show_header=True)
    table.add_column("phase")
    for metric in ("TTFT", "TPOT"):
        table.add_column(f"{metric} ms", justify="right")
        table.add_column(f"{metric} change %", justify="right")
    effects = {(e.phase, e.metric): e for e in analysis.effects}
    for phase, summary in analysis.phases.items():
        cells = []
        for metric in ("ttft", "tpot"):
            iv = summary.get(metric)
            cells.append(escape(f"{iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]") if iv and math.isfinite(iv.low)
                         else f"{iv.estimate:.2f}" if iv else "-")
            e = effects.get((phase, metric))
            cells.append(escape(f"{e.effect_pct:+.1f} {_ci(e.ci_low_pct, e.ci_high_pct)} {e.verdict}") if e
                         else "(reference)")
        table.add_row(phase, *cells)
    return table


def drift_document(protocol: DriftProtocol, run: DriftRun, analysis: DriftAnalysis,
                   target: dict[str, str | None]) -> dict[str, Any]:
    return {
        "verdict": analysis.verdict, "verdict_line": analysis.line(), "target": target,
        "protocol": protocol.model_dump(), "alpha": analysis.alpha, "min_effect_pct": analysis.min_effect_pct,
        "phases": [{"phase": r.phase.name, "kind": r.phase.kind, "after_long": r.phase.after_long,
                    "requests": r.requests, "failed": r.failed, "run": r.run_path, "values_ms": r.values,
                    "summary": {m: iv.model_dump() for m, iv in analysis.phases.get(r.phase.name, {}).items()}}
                   for r in run.runs],
        "effects": [dataclasses.asdict(e) for e in analysis.effects],
        "error": run.error, "note": analysis.note,
    }


def drift(
    out: Path = typer.Option(..., "--out", help="result JSON, named exactly so "
                              "(each phase's run beside it: res.json -> res.runs/)"),
    url: opt.Url = None,
    serve: opt.ServeDir = None,
    engine_kind: opt.ServeEngine = "vllm",
    serve_arg: list[str] = typer.Option(
        [], "--serve-arg", help="engine flag(s) for --serve, e.g. '--max-model-len 32768'"),
    model: opt.ServedModel = None,
    tokenizer: opt.Tokenizer = None,
    short_per_phase: int = typer.Option(3, "--short-per-phase", help="short requests in each phase"),
    long_requests: int = typer.Option(
        2, "--long-requests", help="long requests, one between each two short phases"),
    short_input_len: int = typer.Option(256, "--short-input-len"),
    short_output_len: int = typer.Option(64, "--short-output-len"),
    long_input_len: int = typer.Option(
        24_000, "--long-input-len",
        help="prompt tokens of a long request (it must fit the server's max-model-len)"),
    long_output_len: int = typer.Option(16, "--long-output-len"),
    warmups: int = typer.Option(2, "--warmups", help="short requests before the first phase, not measured"),
    seed: int = typer.Option(0, "--seed"),
    alpha: float = typer.Option(0.05, "--alpha", help="intervals are 1 - alpha; Holm across phases and metrics"),
    min_effect_pct: float = typer.Option(
        10.0, "--min-effect-pct", help="a significant change smaller than this is no slowdown"),
    stall_timeout: float | None = typer.Option(
        None, "--stall-timeout", help="seconds a stream may send nothing (default: from the phase's lengths)"),
    connect_timeout: opt.ConnectTimeout = None,
    first_byte_timeout: opt.FirstByteTimeout = None,
    api_key_env: opt.ApiKeyEnv = None,
    force: opt.Force = False,
    allow_busy: opt.AllowBusy = False,
) -> None:
    """Short requests, a long one, short ones again ...: prints each phase's TTFT and TPOT and
    whether the long requests left a slowdown behind."""
    url = check_server_choice(url, serve, serve_arg)
    validate.load_options({"--seed": seed, "--stall-timeout": stall_timeout, "--connect-timeout": connect_timeout,
                           "--first-byte-timeout": first_byte_timeout})
    for option, length in (("--short-input-len", short_input_len), ("--short-output-len", short_output_len),
                           ("--long-input-len", long_input_len), ("--long-output-len", long_output_len)):
        validate.tokens(length, option)
    for option, n in (("--short-per-phase", short_per_phase), ("--long-requests", long_requests)):
        validate.requests(n, option)
    validate.count(warmups, "--warmups", low=0, high=validate.MAX_REQUESTS)
    if not 0 < alpha < 1:
        raise ServetuneError(f"--alpha {alpha:g}: must be between 0 and 1")
    if not math.isfinite(min_effect_pct) or min_effect_pct < 0:
        raise ServetuneError(f"--min-effect-pct {min_effect_pct:g}: must be a finite number >= 0")
    try:
        protocol = DriftProtocol(short_per_phase=short_per_phase, long_requests=long_requests,
                                 short_input_len=short_input_len, short_output_len=short_output_len,
                                 long_input_len=long_input_len, long_output_len=long_output_len,
                                 warmups=warmups, seed=seed, stall_timeout_s=stall_timeout)
    except ValidationError as exc:
        raise ServetuneError(validation_text(exc, _OPTION_OF_FIELD)) from None
    tokenizer = validate.tokenizer_dir(tokenizer)
    api_key = api_key_from_env(api_key_env) if api_key_env is not None or url is not None else None
    output_file(out, "--out", force, "JSON")  # both now: a bad path must not cost the measurements
    runs_dir = companion_dir(runs_dir_of(out), "--out", force)
    on_interrupt(f"nothing written to {out}; the phases measured so far are kept under {runs_dir}")

    silence = Silence(0.0, 0.0)  # set per phase: a long phase may be silent longer
    if serve is not None:
        with served(serve, serve_flags(serve_arg), runs_dir / "logs", "drift", api_key, allow_busy,
                        console.print, engine_kind) as (base_url, key, _):
            run = _measure(base_url, key, tokenizer or serve, protocol, runs_dir, model, silence)
    else:
        assert url is not None
        check_reachable(url, api_key, console, connect_timeout_s=connect_timeout,
                        first_byte_timeout_s=first_byte_timeout)
        run = _measure(url, api_key, tokenizer, protocol, runs_dir, model, silence)
    _conclude(run, protocol, out, runs_dir, {"url": url, "serve": str(serve) if serve else None}, alpha,
              min_effect_pct)


def _announce(protocol: DriftProtocol, silence: Silence, phase: Phase) -> None:
    """A phase named as it starts; the silence line takes that phase's limits."""
    what = (f"{protocol.short_per_phase} short ({protocol.short_input_len} in / "
            f"{protocol.short_output_len} out)" if phase.kind == "short"
            else f"one long ({protocol.long_input_len} in / {protocol.long_output_len} out)")
    console.print(escape(f"{phase.name}: {what} ..."))
    sc = protocol.scenario(phase)
    silence.stall_timeout_s, silence.run_timeout_s = sc.effective_stall_timeout_s, sc.effective_run_timeout_s
    silence.restart()


def _measure(base_url: str, key: str | None, tok: Path | None, protocol: DriftProtocol, runs_dir: Path,
             model: str | None, silence: Silence) -> DriftRun:
    with Live(silence, console=console, transient=True, refresh_per_second=2):
        return run_protocol(base_url, protocol, runs_dir, model=model, tokenizer_dir=tok, api_key=key,
                            on_phase=partial(_announce, protocol, silence))


def _conclude(run: DriftRun, protocol: DriftProtocol, out: Path, runs_dir: Path, target: dict[str, str | None],
              alpha: float, min_effect_pct: float) -> None:
    """The verdict printed and OUT written (nothing, when no phase was measured); exit 1 when the
    protocol did not finish."""
    if not run.runs:
        print_error(f"{run.error or 'no phase was measured'}; nothing written to {out}{_kept(runs_dir)}")
        raise typer.Exit(EXIT_NO_RESULT)
    analysis = analyze(run.short_values(), run.after_long(), alpha=alpha, min_effect_pct=min_effect_pct)
    console.print(phases_table(analysis))
    if run.error:
        console.print(f"[red]error:[/] {escape(run.error)}")
    console.print(escape(analysis.line()))
    doc = drift_document(protocol, run, analysis, target)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(escape(f"wrote {out} and the runs under {runs_dir}"))
    if run.error:  # the protocol stopped early: its verdict covers only part of it
        print_error(f"{run.error}; the protocol did not finish, so the verdict above is not a result "
                    f"(what was measured is kept in {out})")
        raise typer.Exit(EXIT_NO_RESULT)

def register(app: typer.Typer) -> None:
    app.command("drift")(drift)


def _kept(runs_dir: Path) -> str:
    """What a drift that measured no phase leaves: its runs folder is removed when it holds nothing."""
    if not runs_dir.is_dir():
        return ""
    if any(runs_dir.iterdir()):
        return f"; what was sent is kept under {runs_dir}"
    runs_dir.rmdir()
    return ""
