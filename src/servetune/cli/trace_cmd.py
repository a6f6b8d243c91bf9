"""`servetune trace summary FILE` (table and plot of a recorded trace) and `servetune trace cut
FILE --out WINDOW.jsonl` (a window of it to replay)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ServetuneError
from ..load.trace.cut import write_mooncake
from ..load.trace.formats import read_trace
from ..load.trace.rows import TraceRow
from ..load.trace.spec import MOONCAKE_BLOCK_TOKENS, TraceSpec
from ..load.trace.summary import TraceSummary, WindowPick, pick_window, summarize
from ..load.trace.window import select
from .paths import output_file

console = Console()
FORMAT_HELP = "auto (detected), mooncake, azure, burstgpt or servetune"
PICK_HELP = "choose the window: representative (closest to the whole trace) or peak (the busiest)"


def _rows(path: Path, fmt: str) -> list[TraceRow]:
    if not path.is_file():
        raise ServetuneError(f"{path}: no such trace file")
    rows = list(read_trace(path, fmt))
    if not rows:
        raise ServetuneError(f"{path}: the trace has no requests")
    return rows


def _pick(pick: str | None, rows: list[TraceRow], duration_s: float | None, block: int, cache_block: int) -> float:
    if pick not in ("representative", "peak"):
        raise ServetuneError(f"--pick {pick!r}: expected representative or peak")
    if duration_s is None:
        raise ServetuneError("--pick needs --duration-s (the window's length)")
    how: WindowPick = "peak" if pick == "peak" else "representative"
    return pick_window(rows, duration_s, how, block, cache_block)


def summary_table(title: str, summary: TraceSummary) -> Table:
    table = Table(title=escape(title), show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for what, value in summary.rows_table():
        table.add_row(what, value)
    return table


def summary_cmd(
    path: Path = typer.Argument(..., help="the trace file"),
    fmt: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    plot: Path | None = typer.Option(None, "--plot", help="write the arrival rate and length plot (PNG) here"),
    block_size: int = typer.Option(MOONCAKE_BLOCK_TOKENS, "--block-size", min=1, help="tokens per hash id"),
    cache_block_size: int = typer.Option(16, "--cache-block-size", min=1, help="the server's KV block"),
    duration_s: float | None = typer.Option(None, "--duration-s", help="with --pick: the window to show"),
    pick: str | None = typer.Option(None, "--pick", help=PICK_HELP),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --plot file"),
) -> None:
    """Rows, span, arrival rate and bursts, length distributions, implied prefix reuse."""
    if plot is not None:
        output_file(plot, "--plot", force, "PNG", [path])  # before reading a trace of millions of rows
    rows = _rows(path, fmt)
    whole = summarize(rows, block_size, cache_block_size)
    console.print(summary_table(f"{path.name}: the whole trace", whole))
    window = None
    if pick is not None:
        start = _pick(pick, rows, duration_s, block_size, cache_block_size)
        assert duration_s is not None
        window = (start, duration_s)
        t0 = min(r.t_s for r in rows)
        inside = [r for r in rows if start <= r.t_s - t0 < start + duration_s]
        console.print(summary_table(f"{pick} window: start_s {start:g}, duration_s {duration_s:g}",
                                    summarize(inside, block_size, cache_block_size)))
    if plot is not None:
        from ..report.trace_plot import trace_overview

        plot.write_bytes(trace_overview(rows, whole, path.name, window))
        console.print(escape(f"wrote {plot}"))


def cut_cmd(
    path: Path = typer.Argument(..., help="the trace file"),
    out: Path = typer.Option(..., "--out", help="the window, as Mooncake JSONL from time 0"),
    fmt: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    start_s: float = typer.Option(0.0, "--start-s", min=0, help="window start, seconds from the first row"),
    duration_s: float | None = typer.Option(None, "--duration-s", help="window length (default: to the end)"),
    pick: str | None = typer.Option(None, "--pick", help=PICK_HELP + " (instead of --start-s)"),
    sample: float = typer.Option(1.0, "--sample", help="share of requests (whole sessions) kept"),
    max_requests: int | None = typer.Option(None, "--max-requests", min=1),
    seed: int = typer.Option(0, "--seed", help="which requests a sample keeps"),
    block_size: int = typer.Option(MOONCAKE_BLOCK_TOKENS, "--block-size", min=1, help="tokens per hash id"),
    cache_block_size: int = typer.Option(16, "--cache-block-size", min=1, help="the server's KV block"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --out file (never the trace itself)"),
) -> None:
    """Write a window (or a sample) of the trace; its summary is printed."""
    output_file(out, "--out", force, "JSON lines", [path])  # before reading a trace of millions of rows
    rows = _rows(path, fmt)
    if pick is not None:
        start_s = _pick(pick, rows, duration_s, block_size, cache_block_size)
    try:
        spec = TraceSpec(path=path, start_s=start_s, duration_s=duration_s, sample=sample,
                         max_requests=max_requests, seed=seed)
    except ValueError as exc:
        raise ServetuneError(f"trace cut: {str(exc).splitlines()[-1].strip()}") from None
    replay = select(rows, spec, str(path))
    written = write_mooncake(replay, out)
    console.print(summary_table(f"{out.name}: start_s {start_s:g}, duration_s {duration_s or 'to the end'}",
                                summarize(list(read_trace(out, "mooncake")), block_size, cache_block_size)))
    console.print(escape(f"wrote {written} requests to {out}"))


def register(app: typer.Typer) -> None:
    trace_app = typer.Typer(help="Recorded traces: summarize one, cut a window of it to replay.", no_args_is_help=True)
    trace_app.command("summary")(summary_cmd)
    trace_app.command("cut")(cut_cmd)
    app.add_typer(trace_app, name="trace")
