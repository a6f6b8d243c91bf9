"""`servetune pareto DIR --x METRIC --y METRIC`: a finished study's Pareto front of two metrics,
each config with its intervals and standing (report/pareto.py), as a table and optionally a plot."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import NoResult, ServetuneError
from ..report.pareto import Panel, axis_problem, estimated_metric
from ..report.templating import estimate
from .paths import output_file

console = Console()
AXIS_HELP = ("a scenario metric (output_throughput, p99_ttft_ms, request_goodput, capacity, ...), "
             "objective, kv_cache_gib or joules_per_token")


def pareto_cmd(
    study_dir: Path = typer.Argument(..., help="study directory (holds study.sqlite)"),
    x: str = typer.Option(..., "--x", help=f"the horizontal axis: {AXIS_HELP}"),
    y: str = typer.Option(..., "--y", help="the vertical axis, as --x"),
    scenario: str | None = typer.Option(None, "--scenario", help="only this scenario's front (default: every one)"),
    plot: Path | None = typer.Option(None, "--plot", help="also write the front as a PNG here"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --plot file"),
) -> None:
    """The configs no other beats on both metrics, with their intervals: front, tied (beaten only by
    estimates whose intervals overlap) or dominated (and by which)."""
    from ..analysis.analysis import analyze
    from ..analysis.profiles import analyze_profiles
    from ..report import pareto
    from ..report.plots import pareto_front
    from .stored_study import stored_study

    for option, name in (("--x", x), ("--y", y)):
        if problem := axis_problem(name):
            raise ServetuneError(f"{option}: {problem}")
    if x == y:
        raise ServetuneError(f"--x and --y are both {x!r}: a front needs two metrics")
    if plot is not None:
        output_file(plot, "--plot", force, "PNG", [study_dir / "study.sqlite"])
    extra = [m for m in (x, y) if estimated_metric(m)]
    with stored_study(study_dir) as (store, spec):
        if scenario is not None and scenario not in spec.scenario_names:
            raise ServetuneError(f"--scenario {scenario!r}: the study has {', '.join(spec.scenario_names)}")
        analysis = analyze(store, spec, extra)
        profiles = analyze_profiles(store, spec, extra)
        panels = [p for p in pareto.panels(analysis, store.trials(), x, y, pareto.picks(analysis, profiles))
                  if scenario is None or p.scenario in ("", scenario)]
    if not panels:
        raise NoResult(f"{study_dir}: no config that ran has a value of both {x} and {y}; nothing written")
    for panel in panels:
        console.print(_table(panel))
    if plot is not None:
        png = pareto_front(panels)
        if png is not None:
            plot.write_bytes(png)
            console.print(f"plot: {escape(str(plot))}")


def _table(panel: Panel) -> Table:
    title = f"Pareto front: {panel.y.label} against {panel.x.label}"
    table = Table(title=escape(f"{panel.scenario}: {title}" if panel.scenario else title))
    for column in ("config", panel.x.name, panel.y.name, "standing", "chosen by"):
        table.add_column(escape(column))
    for r in panel.ranked:
        standing = f"dominated by {', '.join(r.dominated_by)}" if r.dominated_by else str(r.standing)
        label = r.point.label + (" (baseline)" if r.point.is_baseline and r.point.label != "baseline" else "")
        table.add_row(escape(label), estimate(r.point.x), estimate(r.point.y), escape(standing),
                      escape(", ".join(r.point.picks) or "–"))
    if panel.missing:
        table.caption = escape(f"no value on an axis: {', '.join(panel.missing)}")
    return table


def register(app: typer.Typer) -> None:
    app.command("pareto")(pareto_cmd)
