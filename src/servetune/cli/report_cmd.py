"""`servetune report DIR` and `servetune compare A B`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ServetuneError
from .paths import not_a_file, output_file, writable_dir

console = Console()


def report(
    study_dir: Path = typer.Argument(..., help="study directory (holds study.sqlite)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="where to write (default: the study directory)"),
) -> None:
    """Write report.md, report.html and the winning config (winner/) from a study's store, and each
    profile's (profiles/NAME/)."""
    from ..analysis.analysis import analyze
    from ..analysis.profiles import analyze_profiles
    from ..report import write_report
    from .stored_study import stored_study

    if out is not None:
        not_a_file(out, "--out")  # before the analysis, which can take a while
    with stored_study(study_dir) as (store, spec):
        analysis = analyze(store, spec)
        profiles = analyze_profiles(store, spec)
        paths = write_report(analysis, store, writable_dir(out or study_dir, "--out"), profiles)
    console.print(escape(analysis.winner_reason) if analysis.winner is None else
                  f"[bold green]winner:[/] {escape(analysis.winner.label)}")
    for name in ("markdown", "html"):
        console.print(f"{name}: {escape(str(paths[name]))}")
    snippet_dir = next((p.parent for k, p in paths.items() if k.endswith(":command")), None)
    if snippet_dir is not None:
        console.print(f"config: {escape(str(snippet_dir))}/")
    for name, a in profiles.items():
        folder = next((p.parent for k, p in paths.items() if k.startswith(f"profile:{name}:")
                       and k.endswith(":command")), None)
        chosen = f"winner {a.winner.label}" if a.winner is not None else "no winner (the baseline)"
        console.print(f"profile {escape(name)}: {escape(chosen)}" + (f", {escape(str(folder))}/" if folder else ""))


def compare_cmd(
    a: Path = typer.Argument(..., help="A: bench result JSON, directory of them, or study directory"),
    b: Path = typer.Argument(..., help="B: the same kinds as A"),
    metric: list[str] = typer.Option([], "--metric", "-m", help="metric to compare (repeatable); "
                                     "default: throughputs and mean/p99 of TTFT, TPOT, ITL, E2EL"),
    confidence: float = typer.Option(0.95, min=0.5, max=0.999, help="confidence level of the intervals"),
    markdown_file: Path | None = typer.Option(None, "--markdown", help="also write the table as Markdown"),
    anyway: bool = typer.Option(False, "--anyway", help="compare sides that are not comparable (a failed run, "
                                "a different workload): their rows are marked NOT COMPARABLE with the reason"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing --markdown file"),
) -> None:
    """B versus A per scenario and metric: effect with CI and a verdict. Refuses a side whose run
    failed, or sides of different workloads, unless --anyway."""
    from ..report.compare import DEFAULT_METRICS, compare_sides, load_side, markdown, rich_table
    from ..study.metrics import check_metric

    try:
        metrics = [check_metric(m) for m in metric] or list(DEFAULT_METRICS)
    except ValueError as exc:
        raise ServetuneError(f"--metric: {exc}") from exc
    if markdown_file is not None:
        output_file(markdown_file, "--markdown", force, "Markdown", [a, b])
    side_a, side_b = load_side(a), load_side(b)
    rows = compare_sides(side_a, side_b, metrics, confidence, anyway=anyway)
    console.print(rich_table(rows, side_a, side_b, confidence))
    if markdown_file is not None:
        markdown_file.write_text(markdown(rows, side_a, side_b, confidence))
        console.print(f"markdown: {escape(str(markdown_file))}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
    app.command("compare")(compare_cmd)
