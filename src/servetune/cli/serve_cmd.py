"""`servetune serve --model DIR [--port N] -- [engine flags...]`: one server, verified, until Ctrl-C."""

from __future__ import annotations

import json
import shlex
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from ..engine.base import Engine, StartResult
from ..engine.bootfacts import log_message
from ..engine.config import Config, FlagValue, is_env_name, normalize_flag_name
from ..engine.profile import Capability
from ..engine.registry import build_engine
from ..errors import ServetuneError
from ..machine import checked_record
from . import server_options as opt
from . import validate
from .paths import writable_dir

console = Console()


def flags_from_argv(argv: list[str]) -> dict[str, FlagValue]:
    """`--x 1 --y --no-z --w a b --j={"k":1}` -> {x: "1", y: True, z: False, w: ["a", "b"], j: {"k": 1}}."""
    flags: dict[str, FlagValue] = {}
    name: str | None = None
    values: list[str] = []

    def flush() -> None:
        if name is None:
            return
        if not values:
            negated = name.startswith("no-")
            flags[name[3:] if negated else name] = not negated
        else:
            parsed = [_value(v) for v in values]
            flags[name] = parsed[0] if len(parsed) == 1 else parsed

    for item in argv:
        if item.startswith("--") and len(item) > 2:
            flush()
            key, eq, value = item[2:].partition("=")
            name, values = normalize_flag_name(key), ([value] if eq else [])
        elif name is None:
            raise ServetuneError(f"engine flags must start with --NAME; got {item!r} first")
        else:
            values.append(item)
    flush()
    return flags


def _value(text: str) -> Any:
    """JSON objects/lists become dicts/lists (so the applied check compares them field by field)."""
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _facts_table(result: StartResult) -> Table:
    table = Table(title="BootFacts", show_header=False)
    table.add_column("fact", style="bold")
    table.add_column("value")
    data = result.boot_facts.model_dump(exclude={"evidence", "engine_config", "compilation_config", "warnings",
                                                 "notable"})
    for key, value in data.items():
        if value in (None, {}, [], False):
            continue
        if isinstance(value, float):
            value = round(value, 2)
        table.add_row(key, json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    return table


def _applied_table(result: StartResult) -> Table:
    table = Table(title="Applied vs requested")
    for col in ("flag", "requested", "applied", "why", "log line"):
        table.add_column(col, overflow="fold")
    for m in result.mismatches:
        line = log_message(m.evidence_line or "")[:160]
        table.add_row(m.flag, str(m.requested), str(m.applied), m.reason, line)
    return table


def _print_start(result: StartResult, config: Config) -> None:
    console.print(_facts_table(result))
    facts = result.boot_facts
    for line in facts.notable:
        console.print("notable: " + line, style="yellow", markup=False)
    if facts.warnings:
        console.print(f"[dim]{len(facts.warnings)} warning(s) in the log:[/]")
        for line in facts.warnings:
            console.print(f"  - {line[:200]}", style="dim", markup=False, highlight=False)
    if result.mismatches:
        console.print(_applied_table(result))
    elif config.flags:
        console.print(f"[green]applied check:[/] all {len(config.flags)} requested flag(s) took effect as far "
                      "as the log shows")
    if result.knobs:
        console.print(_knobs_table(result))


def _knobs_table(result: StartResult) -> Table:
    table = Table(title="Environment knobs")
    for col in ("knob", "requested", "status", "why", "log line"):
        table.add_column(col, overflow="fold")
    for k in result.knobs:
        table.add_row(k.knob, k.requested, k.status.value, k.reason, log_message(k.evidence_line or "")[:160])
    return table


def _print_failure(result: StartResult) -> None:
    console.print(f"[bold red]start failed: {result.outcome.value}[/] - {result.detail}")
    for line in result.evidence:
        console.print(f"  > {line[:400]}", style="red", markup=False, highlight=False)
    if result.log_tail:
        console.print("[dim]last log lines:[/]")
        for line in result.log_tail.splitlines()[-25:]:
            console.print(f"  {line[:300]}", style="dim", highlight=False, markup=False)
    if result.log_path:
        console.print(f"full log: {result.log_path}")


def serve(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", help="model directory or name"),
    port: int | None = typer.Option(None, "--port", help="loopback port (default: a free one)"),
    startup_timeout: float = typer.Option(900.0, "--startup-timeout", help="seconds until /health must be 200"),
    command: str | None = typer.Option(
        None, "--command",
        help="base command, split like a shell would but run without one "
             "(default: the engine's launcher module; a bare python means this interpreter)"),
    log_dir: Path = typer.Option(Path("runs/serve"), "--log-dir", help="where the server log goes"),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE for the server's environment (repeatable)"),
    pin_engine_core: bool = typer.Option(
        False, "--pin-engine-core",
        help="vLLM's CPU build on few cores: pin its busy-waiting EngineCore to the workers' cores and the "
             "API server to the others (smooth streaming, repeatable runs)"),
    allow_busy: opt.AllowBusy = False,
    engine_kind: opt.EngineKind = "vllm",
) -> None:
    """Start one server with the engine flags after `--`, print what took effect, stay up until
    Ctrl-C or SIGTERM (then tear it down cleanly)."""
    validate.count(port, "--port", high=65535)
    validate.seconds(startup_timeout, "--startup-timeout")
    base = validate.command(command)
    config = Config.of(flags_from_argv(list(ctx.args)), env=_env_vars(env))
    writable_dir(log_dir, "--log-dir")  # before the boot, not when the log is first written
    engine: Engine = build_engine(engine_kind, base, model, startup_timeout_s=startup_timeout, log_dir=log_dir,
                                  pin_engine_core=pin_engine_core, where="serve --pin-engine-core",
                                  needs=Capability.engine_core_pinning if pin_engine_core else None)
    served_name = engine.served_model_name(config)
    log_path = log_dir / f"serve-{time.strftime('%Y%m%d-%H%M%S')}.log"
    checked_record(None, allow_busy=allow_busy, where="serve")
    console.print(f"starting {engine.profile.label} (log: {log_path}) ...")

    sigterm = _Sigterm()
    previous = signal.signal(signal.SIGTERM, sigterm)
    result: StartResult | None = None
    try:
        result = engine.start(config, log_path, port)
        _serve_until_stopped(engine, result, config, served_name)
    except KeyboardInterrupt:
        console.print("stopping ..." if sigterm.received else "interrupted, stopping ...")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if result is not None and result.server is not None:
            report = engine.stop(result.server)
            state = "clean" if report.clean else f"left pids {report.left_pids}, port free: {report.port_free}"
            console.print(f"stopped ({state})")


def _env_vars(items: list[str]) -> dict[str, str]:
    """--env NAME=VALUE items as the server's extra environment."""
    env_vars: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not is_env_name(name):
            raise ServetuneError(f"--env expects NAME=VALUE with NAME of letters, digits and _, got {item!r}")
        env_vars[name] = value
    return env_vars


class _Sigterm:
    """A SIGTERM handler that stops `serve` as Ctrl-C does, remembering that it was the signal."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        raise KeyboardInterrupt


def _serve_until_stopped(engine: Engine, result: StartResult, config: Config, served_name: str) -> NoReturn:
    """What the start did, then the server watched until Ctrl-C or SIGTERM (KeyboardInterrupt); a
    failed start or a server that dies ends as exit 1. The caller stops the server."""
    if result.argv:
        console.print(" ".join(shlex.quote(a) for a in result.argv), style="dim", highlight=False)
    if not result.ok or result.server is None:
        _print_failure(result)
        raise typer.Exit(1)
    _print_start(result, config)
    if result.cpu_layout:
        console.print("cpu layout: " + result.cpu_layout, markup=False, highlight=False)
    server = result.server
    console.print(f"[bold green]serving[/] {served_name} at {server.url} "
                  f"(pid {server.pid}); Ctrl-C stops it")
    while server.is_alive():
        time.sleep(0.5)
    failure = engine.diagnose(server)
    console.print(f"[bold red]server died: {failure.detail}[/]")
    for line in failure.evidence:
        console.print(f"  > {line[:400]}", style="red", markup=False, highlight=False)
    raise typer.Exit(1)

def register(app: typer.Typer) -> None:
    app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(serve)
