"""`servetune tune STUDY.yaml --out DIR` and `servetune status DIR`."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ..store import StudyStore
from ..tune.display import StudyDisplay, format_duration
from ..tune.eta import estimate

console = Console()


def register(app: typer.Typer) -> None:
    @app.command()
    def tune(
        study_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="study YAML"),
        out: Path = typer.Option(..., "--out", "-o", help="study directory (store, logs, report); "
                                 "run the same command again to resume"),
        report: bool = typer.Option(True, help="write the report when the study ends"),
        stop_after: float | None = typer.Option(
            None, "--stop-after", metavar="SECONDS",
            help="pause cleanly before a trial that would not finish within SECONDS of this session "
                 "(from measured boot and run times); run the same command again to continue"),
    ) -> None:
        """Run (or resume) a tuning study: baseline, search, finalists, verdict."""
        from ..study import load_study
        from ..tune.runner import StudyRunner

        spec = load_study(study_file)
        runner = StudyRunner(spec, out, display=StudyDisplay(Console(stderr=True)), stop_after_s=stop_after)
        result = runner.run()
        if runner.paused:
            console.print(f"[yellow]paused[/] before the next trial (--stop-after {stop_after:g} s); "
                          "run the same command again to continue")
            return
        if result.winner is not None:
            console.print(f"[bold green]winner:[/] {result.winner.label}  ({result.winner_reason})")
        else:
            console.print(f"[bold]no winner:[/] {result.winner_reason}")
        if report:
            from ..report import write_report

            paths = write_report(result, runner.store, out)
            for name in ("markdown", "html"):
                console.print(f"report: {paths[name]}")

    @app.command()
    def status(out: Path = typer.Argument(..., help="study directory")) -> None:
        """Progress of a study from its store: trials done, the current one, ETA."""
        store = StudyStore.open_existing(out)
        spec = store.get_meta_json("spec") or {}
        trials = store.trials()
        runs = store.runs()
        done = [t for t in trials if t.status == "done"]
        running = [t for t in trials if t.status != "done"]
        eta = estimate(trials, runs)
        table = Table(title=f"study {spec.get('name', out)}")
        for col in ("#", "role", "config", "outcome", "boot s", "runs"):
            table.add_column(col)
        base_cfg = next((t.config for t in trials if t.role == "baseline"), None)
        sessions = store.sessions()
        # A live tuner heartbeats every few seconds; a silent open session was killed.
        live = bool(sessions) and sessions[-1].ended_at is None and time.time() - sessions[-1].last_seen < 60
        unfinished = "[green]running[/]" if live else "[yellow]interrupted (resume with the same command)[/]"
        for t in trials:
            n_runs = len([r for r in runs if r.trial_id == t.id])
            table.add_row(str(t.seq), t.role, t.config.label(base_cfg) if base_cfg else t.config.label(),
                          t.outcome or unfinished,
                          f"{t.boot_s:.0f}" if t.boot_s else "-", str(n_runs))
        console.print(table)
        line = f"trials done: {len(done)}"
        if spec:
            from ..study import StudySpec
            from ..tune import analysis

            study = StudySpec.model_validate(spec)
            planned = analysis.planned_trial_count(store, study)
            line += (f" of ~{planned}; ETA {format_duration(analysis.remaining_s(store, study))}"
                     f" ({'measured' if eta.measured else 'guessed'}: boot {eta.boot_s:.0f} s + runs)")
        console.print(f"{line}; unfinished: {len(running)}; wall time so far {format_duration(store.elapsed_wall_s())}")
        verdict = store.get_meta_json("verdict")
        if verdict:
            console.print(f"verdict: {verdict['reason']}")
