"""The `servetune` command. Each sub-command is a top-level function of its own module, whose
`register(app)` attaches it (`app.command(NAME)(function)`; a group adds its own typer app)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import import_module

import typer

from .boundary import run

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="Find the fastest serving configuration of an LLM inference server for your workload, and prove it.",
)

# One module per command group; add a line when a command is added.
COMMAND_MODULES = [
    "model_cmd",
    "serve_cmd",
    "tune_cmd",
    "report_cmd",
    "bench_cmd",
    "capacity_cmd",
    "drift_cmd",
    "soak_cmd",
    "probe_cmd",
    "ab_cmd",
    "plan_cmd",
    "init_cmd",
    "trace_cmd",
    "size_cmd",
    "pareto_cmd",
]

for _name in COMMAND_MODULES:
    import_module(f"{__name__}.{_name}").register(app)


def main(argv: Sequence[str] | None = None) -> None:
    """The `servetune` entry point; errors end as one line and an exit code (cli/boundary.py)."""
    sys.exit(run(app, argv))
