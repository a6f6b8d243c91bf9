"""`servetune tune STUDY.yaml --out DIR` and `servetune status DIR`."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.eta import estimate, first_estimate_summary, for_study, next_trial_s, stored_seed
from ..errors import ServetuneError
from ..store import Run, StudyStore, Trial, TrialRole
from ..study.spec import SpecError
from ..tune.display import StudyDisplay, format_duration
from . import server_options as opt
from . import validate
from .boundary import EXIT_NO_RESULT, on_interrupt, store_errors, validation_text
from .paths import check_store_kind, writable_dir

if TYPE_CHECKING:
    from ..study import StudySpec

console = Console()


def tune(
    study_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="study YAML"),
    out: Path = typer.Option(..., "--out", "-o", help="study directory (store, logs, report); "
                             "run the same command again to resume"),
    report: bool = typer.Option(True, help="write the report when the study ends"),
    stop_after: float | None = typer.Option(
        None, "--stop-after", metavar="SECONDS",
        help="pause cleanly before a trial that would not finish within SECONDS of this session "
             "(from measured boot and run times); run the same command again to continue"),
    ray_address: str | None = typer.Option(
        None, "--ray", metavar="auto|ADDRESS",
        help="run the study's slots (parallel.slots) as actors on a Ray cluster: `auto` (RAY_ADDRESS, "
             "a cluster started here with `ray start`, else a new local one) or the cluster's address; "
             "needs servetune[ray]"),
    dry_run: bool = typer.Option(False, "--dry-run", help="check the engine, the model and the flags, list "
                                 "the candidates, boots and ETA, and start nothing (as `servetune plan`)"),
    allow_busy: opt.AllowBusy = False,
) -> None:
    """Run (or resume) a tuning study: baseline, search, finalists, verdict."""
    from ..study import load_study

    validate.seconds(stop_after, "--stop-after")
    spec = load_study(study_file)
    if dry_run:
        from .plan_cmd import show_plan

        show_plan(spec, study_file)
        return
    from .plan_cmd import warn_random_prompt_speculation

    warn_random_prompt_speculation(spec, study_file)
    try:
        with store_errors(out / StudyStore.FILENAME):
            check_store_kind(out, "study", "--out")  # an A/B's store must not take a study's trials
            writable_dir(out, "--out")  # after the study loaded: a bad study file writes nothing
            on_interrupt(f"the store in {out} keeps every finished trial; run the same command again to resume")
            _tune(spec, out, report, stop_after, ray_address, allow_busy)
    except SpecError as exc:  # the start's checks (engine, model, flags): located as `plan` locates them
        from .plan_cmd import located

        raise located(study_file, exc.problems) from None


def status(out: Path = typer.Argument(..., help="study directory")) -> None:
    """Progress of a study from its store: trials done, the current one, ETA."""
    store = StudyStore.open_existing(out, read_only=True)
    spec = store.spec_doc() or {}
    trials = store.trials()
    runs = store.runs()
    done = [t for t in trials if t.done]
    running = [t for t in trials if not t.done]
    eta = estimate(trials, runs)
    console.print(_trials_table(store, f"study {spec.get('name', out)}", trials, runs))
    line = f"trials done: {len(done)}"
    if spec:
        from ..analysis import analysis
        from ..study import StudySpec

        try:
            study = StudySpec.from_store(spec)
        except ValidationError as exc:
            raise ServetuneError(f"{store.path}: the stored study spec is unreadable: "
                                 f"{validation_text(exc)}") from None
        planned = analysis.planned_trial_count(store, study)
        line += (f" of ~{planned}; ETA {format_duration(analysis.remaining_s(store, study))}"
                 f" ({'measured' if eta.measured else 'guessed'}: boot {eta.boot_s:.0f} s + runs)")
    console.print(f"{line}; unfinished: {len(running)}; wall time so far {format_duration(store.elapsed_wall_s())}")
    if spec:
        console.print(escape(analysis.power_line(analysis.study_power(store, study))))
        console.print(escape(search_stop_line(store, study)))
        if store.final_plan() is not None:
            from ..analysis import revalidation, verdict_rule

            look = revalidation.next_look(analysis.analyze(store, study), study,
                                          verdict_rule.revalidation_cap(store))
            if look.leader is not None:
                pair = 2 * next_trial_s(study, for_study(study, trials, runs, stored_seed(store)), validation=True)
                console.print(escape(f"{look.line()}; a boot pair takes ~{format_duration(pair)}"))
    if first := first_estimate_summary(store):
        console.print(escape(first))
    verdict = store.verdict()
    if verdict:
        console.print(f"verdict: {escape(verdict.reason)}")


def search_stop_line(store: StudyStore, study: StudySpec) -> str:
    """Where the study stands against its stopping rule, or why its search ended by it."""
    from ..analysis import analysis
    from ..search import stopping

    recorded = store.search_stop()
    if recorded is not None:
        return f"search stopped by its rule after {recorded.after_trials} trials: {recorded.reason}"
    return stopping.assess(study, analysis.history(store, study)).line(study.min_effect_pct)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
    app.command("status")(status)


def _ray_slots() -> ModuleType:
    """tune.ray_slots, which needs Ray: an optional dependency, imported only for --ray."""
    if importlib.util.find_spec("ray") is None:
        raise ServetuneError("--ray: Ray is not installed here; install servetune[ray] "
                             "(pip install 'servetune[ray]')")
    from ..tune import ray_slots

    return ray_slots


def _tune(spec: StudySpec, out: Path, report: bool, stop_after: float | None, ray_address: str | None,
          allow_busy: bool) -> None:
    from ..tune.runner import StudyRunner

    display = StudyDisplay(Console(stderr=True))
    if ray_address is None:
        runner = StudyRunner(spec, out, display=display, stop_after_s=stop_after, allow_busy=allow_busy)
        result = runner.run()
    else:
        ray_slots = _ray_slots()
        runner = StudyRunner(spec, out, display=display, stop_after_s=stop_after, allow_busy=allow_busy,
                             slots=ray_slots.RaySlots.factory(spec))
        with ray_slots.ray_cluster(ray_address):
            result = runner.run()
    if runner.paused:
        console.print(f"[yellow]paused[/] before the next trial (--stop-after {stop_after:g} s); "
                      "run the same command again to continue")
        return
    if result.winner is not None:
        console.print(f"[bold green]winner:[/] {escape(result.winner.label)}  ({escape(result.winner_reason)})")
    elif result.baseline_measured:
        console.print(f"[bold]no winner:[/] {escape(result.winner_reason)}")
    else:
        console.print(f"[bold red]no verdict:[/] {escape(result.winner_reason)}")
    from ..report.speculative import peak_line, sweep_peaks

    for peak in sweep_peaks(result):
        console.print(escape(peak_line(peak)))
    if report:
        from ..analysis.profiles import analyze_profiles
        from ..report import write_report

        paths = write_report(result, runner.store, out, analyze_profiles(runner.store, spec))
        for name in ("markdown", "html"):
            console.print(f"report: {escape(str(paths[name]))}")
    if not result.baseline_measured:
        raise typer.Exit(EXIT_NO_RESULT)


def _trials_table(store: StudyStore, title: str, trials: list[Trial], runs: list[Run]) -> Table:
    """One row a trial: its role, config against the baseline, outcome (or running/interrupted), boot, runs."""
    table = Table(title=escape(title))
    # Which slot (and node, on Ray) measured a trial matters once there is more than one place.
    by_slot = len({t.slot for t in trials}) > 1 or any(t.placement and t.placement.node for t in trials)
    for col in ("#", "role", "config", *(("slot",) if by_slot else ()), "outcome", "boot s", "runs"):
        table.add_column(col)
    base_cfg = next((t.config for t in trials if t.role is TrialRole.baseline), None)
    sessions = store.sessions()
    # A live tuner heartbeats every few seconds; a silent open session was killed.
    live = bool(sessions) and sessions[-1].ended_at is None and time.time() - sessions[-1].last_seen < 60
    unfinished = "[green]running[/]" if live else "[yellow]interrupted (resume with the same command)[/]"
    for t in trials:
        n_runs = len([r for r in runs if r.trial_id == t.id])
        where = (_slot_cell(t),) if by_slot else ()
        table.add_row(str(t.seq), t.role, escape(t.config.label(base_cfg) if base_cfg else t.config.label()),
                      *where, escape(t.outcome) if t.outcome else unfinished,
                      f"{t.boot_s:.0f}" if t.boot_s else "-", str(n_runs))
    return table


def _slot_cell(trial: Trial) -> str:
    node = trial.placement.node_label() if trial.placement else None
    return escape(f"{trial.slot} ({node})" if node else str(trial.slot))
