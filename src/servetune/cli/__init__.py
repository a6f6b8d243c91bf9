"""The `servetune` command. Each sub-command lives in its own module with a `register(app)`."""

from __future__ import annotations

import sys
from importlib import import_module

import typer
from rich.console import Console

from ..errors import ServetuneError

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Find the fastest serving configuration of an LLM inference server for your workload, and prove it.",
)
err_console = Console(stderr=True)

# One module per command group; add a line when a command is added.
COMMAND_MODULES = [
    "model_cmd",
    "serve_cmd",
    "tune_cmd",
    "report_cmd",
    "bench_cmd",
]

for _name in COMMAND_MODULES:
    import_module(f"{__name__}.{_name}").register(app)


def main() -> None:
    try:
        app()
    except ServetuneError as exc:
        err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
