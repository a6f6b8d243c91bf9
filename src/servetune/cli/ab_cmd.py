"""`servetune ab A.yaml B.yaml --out DIR`: the upgrade A/B of two engines on one workload."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ServetuneError
from ..store import StudyStore
from ..study.metrics import metric_problem
from . import server_options as opt
from .boundary import EXIT_NO_RESULT, on_interrupt, store_errors
from .paths import check_store_kind, output_file, writable_dir

if TYPE_CHECKING:  # the command imports them when it runs (a fast --help)
    from ..ab.analysis import AbAnalysis
    from ..ab.prefix_reuse import PrefixReuse
    from ..ab.spec import AbSpec

console = Console()
REPORT_NAME = "ab.md"


def ab(
    study_files: list[Path] = typer.Argument(..., exists=True, dir_okay=False,
                                             help="A.yaml B.yaml (two study files: engines A and B, same "
                                                  "scenarios), or one study file with an 'ab: {A: ..., B: ...}' "
                                                  "section of engine keys per side"),
    out: Path = typer.Option(..., "--out", "-o", help="A/B directory (store, logs, ab.md); run the same "
                             "command again to resume"),
    boots: int = typer.Option(2, "--boots", min=1, max=100, help="boots per side, alternating A B A B ..."),
    metric: list[str] = typer.Option([], "--metric", help="a summary metric to compare (repeatable; default: "
                                     "output_throughput, mean_ttft_ms, mean_tpot_ms)"),
    prefix_reuse_len: int = typer.Option(0, "--prefix-reuse-len", min=0, max=1_000_000, metavar="TOKENS",
                                         help="also measure cold vs warm prefix cache: a prompt of TOKENS "
                                              "sent, then the identical one again (0: off)"),
    prefix_reuse_pairs: int = typer.Option(3, "--prefix-reuse-pairs", min=1, max=1000,
                                           help="cold/warm pairs per boot"),
    explain: Path | None = typer.Option(None, "--explain", dir_okay=False, metavar="OUT.yaml",
                                        help="also write a study that boots the newer version with each setting "
                                             "that differs set back to the older side's value, one at a time"),
    force: bool = typer.Option(False, "--force", help="overwrite the --explain file if it exists"),
    allow_busy: opt.AllowBusy = False,
) -> None:
    """Measure two engines (engine versions, images, launch commands) on the same workload, booted
    alternately, and judge B against A per scenario and metric (two-level model, Holm)."""
    from ..ab import prefix_reuse
    from ..ab.analysis import DEFAULT_METRICS
    from ..ab.spec import load_ab

    for name in metric:
        if problem := metric_problem(name):
            raise ServetuneError(f"--metric {name}: {problem}")
    spec = load_ab(study_files)
    reuse = prefix_reuse.prefix_reuse_scenario(prefix_reuse_len, prefix_reuse_pairs) if prefix_reuse_len else None
    if explain is not None:  # before --out is made: a refused name leaves nothing behind
        output_file(explain, "--explain", force, "YAML", study_files)
    with store_errors(out / StudyStore.FILENAME):
        check_store_kind(out, "ab", "--out")  # a study's store must not take an A/B's boots
        writable_dir(out, "--out")  # after the files loaded: bad input writes nothing
        on_interrupt(f"the store in {out} keeps every finished boot; run the same command again to resume")
        result = _ab(spec, out, boots, reuse, list(dict.fromkeys(metric)) or list(DEFAULT_METRICS), allow_busy)
    if explain is not None:
        _write_explain(spec, result, out, explain)
    if not result.measured_boots("A") or not result.measured_boots("B"):
        raise typer.Exit(EXIT_NO_RESULT)


def register(app: typer.Typer) -> None:
    app.command("ab")(ab)


def _ab(spec: AbSpec, out: Path, boots: int, reuse: PrefixReuse | None, metrics: list[str],
        allow_busy: bool) -> AbAnalysis:
    from ..ab.render import config_table, markdown, terminal_lines, terminal_table
    from ..ab.runner import AbRunner
    from ..tune.display import StudyDisplay

    result = AbRunner(spec, out, boots=boots, reuse=reuse, metrics=metrics,
                      display=StudyDisplay(Console(stderr=True)), allow_busy=allow_busy).run()
    console.print(terminal_table(result))
    if result.config.differences:
        console.print(config_table(result.config))
    for line in terminal_lines(result):
        console.print(escape(line))
    path = out / REPORT_NAME
    path.write_text(markdown(result))
    console.print(f"report: {escape(str(path))}")
    return result


def _write_explain(spec: AbSpec, result: AbAnalysis, out: Path, explain: Path) -> None:
    from ..ab.explain import explain_study

    text, toggles = explain_study(spec, result.config, result.versions, str(out), str(explain))
    if text is None:
        console.print(f"[yellow]explain[/]: {escape(str(explain))} not written: no setting that differs between A "
                      "and B is one a flag of the newer engine sets back")
        return
    explain.write_text(text)
    console.print(f"explain: {escape(str(explain))} ({len(toggles)} setting(s) to toggle: "
                  f"{escape(', '.join(t.param for t in toggles))}); next: servetune plan {escape(str(explain))}")
