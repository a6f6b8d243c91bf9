"""`servetune soak`: hours of mixed load against one server, watched for crashes, memory and KV
growth and latency drift, ending with a verdict on its stability."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import typer
from rich.console import Console
from rich.markup import escape

from ..engine import Engine, engine_for
from ..engine.classify import Failure
from ..engine.config import Config
from ..errors import NoResult, ServetuneError
from ..load.scenario import PRESETS
from ..secrets import MASK
from ..soak.document import soak_document
from ..soak.duration import format_duration, parse_duration
from ..soak.plot import soak_plot
from ..soak.report import soak_markdown
from ..soak.run import SoakPlan, SoakRun, run_soak, series
from ..soak.trend import SoakAnalysis, analyze
from ..soak.watch import ServerWatch, listening_pid
from ..soak.window import Window
from ..study.loader import load_study
from ..tune.session import sigterm_as_interrupt
from ..vocabulary import ANY_ENGINE_METRIC_NAMES
from . import server_options as opt
from . import validate
from .bench_cmd import api_key_from_env, build_scenario, serve_flags
from .boundary import EXIT_INTERRUPTED, EXIT_NO_RESULT, on_interrupt, print_error
from .paths import companion_dir, output_file, result_file, runs_dir_of
from .server_check import check_reachable

console = Console()
# Not stable (unstable or crashed): the result is written, and a script can tell it from "no result" (1).
EXIT_NOT_STABLE = 3
DEFAULT_WINDOW_S = 300.0


def soak(
    study: Path | None = typer.Argument(None, help="study file: boot its engine with its baseline flags "
                                        "(and --serve-arg) and cycle its scenarios (with --url: its scenarios "
                                        "against that server, nothing booted)"),
    out: Path = typer.Option(..., "--out", help="result JSON, named exactly so (the report res.md, its figure "
                             "res.png and each window's run under res.runs/ beside it)"),
    duration: str = typer.Option(..., "--duration", help="how long to soak: 90s, 30m, 2h, 1h30m"),
    window: str | None = typer.Option(None, "--window", help="length of one window, one scenario each in turn "
                                      "(default: 5m, or a tenth of --duration when that is shorter)"),
    url: opt.Url = None,
    scenario: list[str] = typer.Option(
        [], "--scenario", help=f"preset to cycle (repeatable; default: the study's scenarios): {', '.join(PRESETS)}"),
    serve_arg: list[str] = typer.Option([], "--serve-arg", help="engine flag(s) laid over the study's, e.g. "
                                        "'--max-num-seqs 64'"),
    model: opt.ServedModel = None,
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="model dir with tokenizer.json (default: the "
                                          "study's model directory, else the server's /tokenize)"),
    pid: int | None = typer.Option(None, "--pid", help="with --url: the server's process, whose tree's memory is "
                                   "watched (default: the process listening on the URL's port, when visible)"),
    server_log: Path | None = typer.Option(None, "--server-log", help="with --url: the server's log, whose tail "
                                           "classifies a crash"),
    alpha: float = typer.Option(0.05, "--alpha", help="intervals are 1 - alpha; Holm across the signals"),
    min_effect_pct: float = typer.Option(10.0, "--min-effect-pct", help="latency growth over the soak (%) "
                                         "below which a significant trend is no drift"),
    min_rss_growth_pct: float = typer.Option(10.0, "--min-rss-growth-pct", help="memory growth over the soak "
                                             "(% of its mean) below which a significant trend is no leak"),
    connect_timeout: opt.ConnectTimeout = None,
    first_byte_timeout: opt.FirstByteTimeout = None,
    api_key_env: opt.ApiKeyEnv = None,
    force: opt.Force = False,
) -> None:
    """Windows of the scenarios in turn until --duration is spent; after each, the server's health,
    memory, KV use and preemptions. Ends with stable / unstable (which signal, its slope and
    interval) / crashed, and writes OUT, its report and figure. Exit 0 stable, 3 unstable or
    crashed, 1 no verdict, 130 interrupted (what was measured is written)."""
    duration_s = parse_duration(duration, "--duration")
    window_s = min(DEFAULT_WINDOW_S, duration_s / 10) if window is None else parse_duration(window, "--window")
    if window_s > duration_s:
        raise ServetuneError(f"--window {window} is longer than --duration {duration}")
    if not 0 < alpha < 1:
        raise ServetuneError(f"--alpha {alpha:g}: must be between 0 and 1")
    for option, value in (("--min-effect-pct", min_effect_pct), ("--min-rss-growth-pct", min_rss_growth_pct)):
        if not math.isfinite(value) or value < 0:
            raise ServetuneError(f"{option} {value:g}: must be a finite number >= 0")
    if url is None and study is None:
        raise ServetuneError("give a study file (servetune boots its server), or --url of a running server")
    validate.load_options({"--connect-timeout": connect_timeout, "--first-byte-timeout": first_byte_timeout})
    if url is not None:
        url = validate.url(url)
        if serve_arg:
            raise ServetuneError("--serve-arg goes with a study file whose server servetune boots (no --url)")
        if study is None and not scenario:
            raise ServetuneError("--url needs --scenario PRESET (one or more, cycled) or a study file's scenarios")
    elif pid is not None or server_log is not None:
        raise ServetuneError("--pid and --server-log go with --url (a booted server is watched by servetune)")
    if pid is not None and not psutil.pid_exists(pid):
        raise ServetuneError(f"--pid {pid}: no such process on this host")
    if server_log is not None and not server_log.is_file():
        raise ServetuneError(f"--server-log {server_log}: no such file")
    output_file(out, "--out", force, "JSON", [study, server_log])  # its report and figure go beside it
    scenarios = [build_scenario(name) for name in scenario]
    spec = load_study(study) if study is not None else None
    if spec is not None and not scenarios:
        scenarios = list(spec.scenarios)
    extra = Config.of(serve_flags(serve_arg))
    tokenizer = validate.tokenizer_dir(tokenizer)
    report_path, plot_path = _companion(out, ".md"), _companion(out, ".png")
    for path in (out, report_path, plot_path):  # all now: a bad path must not cost hours of soak
        result_file(path, "--out", force)
    runs_dir = companion_dir(runs_dir_of(out), "--out", force)
    plan = SoakPlan(scenarios, duration_s, window_s)
    thresholds = {"ttft": min_effect_pct, "tpot": min_effect_pct, "rss": min_rss_growth_pct}
    result = SoakRun()
    target: dict[str, Any] = {"url": url, "study": str(study) if study else None}
    console.print(escape(f"soak: {format_duration(duration_s)} in windows of {format_duration(window_s)}, "
                         f"cycling {', '.join(sc.name for sc in scenarios)}"))
    try:
        with sigterm_as_interrupt():
            if spec is not None and url is None:
                engine = engine_for(spec.engine)
                engine.check_secrets()
                config = spec.baseline_config().merged(extra)
                with _booted(engine, config, runs_dir) as (watch, log_path):
                    secret = engine.profile.is_secret_flag
                    target["config"] = {k: MASK if secret(k) else v for k, v in config.flags.items()}
                    run_soak(watch, plan, runs_dir, model=model, tokenizer_dir=tokenizer or _model_tokenizer(spec),
                             metric_names=engine.metric_names, log_path=log_path,
                             diagnose=_diagnoser(engine, watch), redact=engine.redact, on_window=_print_window,
                             result=result)
            else:
                assert url is not None
                api_key = api_key_from_env(api_key_env)
                check_reachable(url, api_key, console, connect_timeout_s=connect_timeout,
                                first_byte_timeout_s=first_byte_timeout)
                watch = ServerWatch(url, api_key, pid=pid if pid is not None else listening_pid(url))
                if watch.pid is None:
                    console.print("[yellow]the server's process is not visible here: its memory is not watched "
                                  "(name it with --pid)[/]")
                run_soak(watch, plan, runs_dir, model=model, tokenizer_dir=tokenizer,
                         metric_names=ANY_ENGINE_METRIC_NAMES, log_path=server_log, on_window=_print_window,
                         result=result)
    except KeyboardInterrupt:
        result.interrupted = True
    _conclude(plan, result, out, report_path, plot_path, runs_dir, target, alpha, thresholds)


def _companion(out: Path, suffix: str) -> Path:
    """res.json -> res.md / res.png beside it (a `.json` ending dropped, as for res.runs/)."""
    return out.with_name(out.name.removesuffix(".json") + suffix)


def _model_tokenizer(spec: Any) -> Path | None:
    model_dir = Path(str(spec.engine.model))
    return model_dir if (model_dir / "tokenizer.json").is_file() else None


@contextmanager
def _booted(engine: Engine, config: Config, runs_dir: Path) -> Iterator[tuple[ServerWatch, Path]]:
    """The study's server up for the soak, always stopped; a failed boot is no result (exit 1)."""
    log_path = runs_dir / "logs" / "soak.server.log"
    console.print("starting the server ...")
    started = engine.start(config, log_path)
    if not started.ok or started.server is None:
        raise NoResult(f"the server did not start: {started.outcome.value}: {started.detail}")
    server = started.server
    console.print(escape(f"server up at {server.url}"))
    try:
        yield ServerWatch(server.url, engine.client_api_key(config), pid=server.pid, server=server), log_path
    finally:
        engine.stop(server)


def _diagnoser(engine: Engine, watch: ServerWatch) -> Any:
    def diagnose() -> Failure:
        assert watch.server is not None
        return engine.diagnose(watch.server)
    return diagnose


def _print_window(w: Window) -> None:
    parts = [f"window {w.index} {w.scenario}: {w.outcome}, {w.requests} requests"]
    for label, value, unit in (("TTFT", w.ttft_ms, "ms"), ("TPOT", w.tpot_ms, "ms"), ("RSS", w.rss_mib, "MiB"),
                               ("KV", w.kv_cache_usage, "%")):
        if value is not None:
            parts.append(f"{label} {value:.1f} {unit}")
    console.print(escape(", ".join(parts)))


def _conclude(plan: SoakPlan, run: SoakRun, out: Path, report_path: Path, plot_path: Path, runs_dir: Path,
              target: dict[str, Any], alpha: float, thresholds: dict[str, float]) -> None:
    """The verdict printed and the files written (nothing when no window ended); the exit code."""
    if not run.windows:
        why = "interrupted before a window ended" if run.interrupted else "no window was measured"
        print_error(f"{why}; nothing written to {out}")
        raise typer.Exit(EXIT_INTERRUPTED if run.interrupted else EXIT_NO_RESULT)
    analysis = analyze(series(run.windows), [w.mid_hours for w in run.windows], [w.scenario for w in run.windows],
                       alpha=alpha, thresholds=thresholds,
                       crash_detail=run.crash.line() if run.crash is not None else None)
    _write(plan, run, analysis, out, report_path, plot_path, target)
    console.print(escape(analysis.line()), style="bold", highlight=False)
    wrote = f"wrote {out}, {report_path}" + (f", {plot_path}" if plot_path.is_file() else "") + \
        f" and the windows' runs under {runs_dir}"
    console.print(escape(wrote))
    if run.interrupted:
        on_interrupt(f"kept {len(run.windows)} windows ({format_duration(run.seconds)}) in {out}; "
                     "the verdict covers only them")
        raise typer.Exit(EXIT_INTERRUPTED)
    if analysis.verdict in ("unstable", "crashed"):
        raise typer.Exit(EXIT_NOT_STABLE)
    if analysis.verdict == "unknown":
        print_error(f"{analysis.note}; no verdict (the windows measured are kept in {out})")
        raise typer.Exit(EXIT_NO_RESULT)


def _write(plan: SoakPlan, run: SoakRun, analysis: SoakAnalysis, out: Path, report_path: Path, plot_path: Path,
           target: dict[str, Any]) -> None:
    doc = soak_document(plan, run, analysis, target)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    figure = soak_plot(run.windows, run.crash, [t.signal for t in analysis.unstable])
    if figure is not None:
        plot_path.write_bytes(figure)
    where = target["url"] or target["study"]
    report_path.write_text(soak_markdown(plan, run, analysis, str(where), plot_path.name if figure else None))


def register(app: typer.Typer) -> None:
    app.command("soak")(soak)

