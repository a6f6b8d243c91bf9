"""`servetune plan STUDY.yaml` (and `servetune tune ... --dry-run`): the study's checks, candidates,
boots and ETA, without starting a server."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engine.hardware import detect
from ..errors import ServetuneError
from ..search import stopping
from ..study import StudySpec
from ..study.loader import located_lines
from ..study.representative import speculative_warnings
from ..study.spec import Loc
from ..study.yaml_lines import load_yaml
from ..tune.display import format_duration
from ..tune.plan import StudyPlan, make_plan

console = Console()


def plan(
    study_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="study YAML"),
    offline: bool = typer.Option(False, "--offline", help="do not ask the Hugging Face Hub for a model id "
                                 "that is not in the local cache"),
) -> None:
    """What a study will do, without starting a server: checks, candidates, boots, runs, ETA."""
    from ..study import load_study

    show_plan(load_study(study_file), study_file, ask_hub=not offline)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def show_plan(spec: StudySpec, study_file: Path, *, ask_hub: bool = True) -> None:
    """Print the plan; a study that would fail (engine, model, flags) ends as exit 2, one line a problem."""
    from ..engine import engine_for

    engine = engine_for(spec.engine)
    result = make_plan(spec, engine.read_defaults, ask_hub=ask_hub, hardware=detect())
    _print(result, study_file)
    if result.problems:
        raise located(study_file, result.problems)


def warn_random_prompt_speculation(spec: StudySpec, study_file: Path) -> None:
    """At a study's start as in its plan: speculative decoding swept on prompts that say nothing."""
    for line in located_lines(load_yaml(study_file), speculative_warnings(spec)):
        console.print(f"[bold red]warning[/]: {escape(line)}")


def located(study_file: Path, problems: list[tuple[Loc, str]]) -> ServetuneError:
    """One `file:line: key: message` line a problem (the plan's, or a real study's start checks)."""
    return ServetuneError("\n".join(located_lines(load_yaml(study_file), problems)))


def _print(plan: StudyPlan, study_file: Path) -> None:
    spec = plan.spec
    ok, bad = "[green]ok[/]", "[red]problem[/]"
    console.print(f"study {escape(spec.name)} ({escape(str(study_file))}), strategy {spec.strategy}")
    console.print(f"  engine:   {ok if plan.engine_found else bad} {escape(plan.engine)}")
    console.print(f"  defaults: {escape(plan.defaults.source)}")
    if plan.defaults.known:
        searched = [n for n in dict.fromkeys([*spec.space, *spec.engine.args]) if "." not in n]
        shown = [f"{n}={plan.defaults.default(n)!r}" if plan.defaults.default(n) is not None
                 else f"{n}=(resolved at start-up)" for n in searched]
        console.print(f"            {escape(', '.join(shown))}")
    console.print(f"  model:    {ok if plan.model.reachable else bad} {escape(spec.engine.model)}: "
                  f"{escape(plan.model.where)}")
    if plan.defaults.flags:
        console.print(f"  flags:    {len(spec.engine.args)} baseline, {len(spec.space)} searched: "
                      f"{'all known to the engine' if not _flag_lines(plan) else 'see the problems below'}")
    _print_knobs(plan)
    table = Table(title="candidates in the strategy's order", title_justify="left")
    table.add_column("#")
    table.add_column("config (against the baseline)")
    table.add_column("boots?")
    for i, candidate in enumerate(plan.candidates, 1):
        boots = ("yes" if candidate.only_if is None else f"{escape(candidate.only_if)}") \
            if candidate.duplicate is None else f"no: {escape(candidate.duplicate)}"
        table.add_row(str(i), escape(candidate.label), boots)
    if plan.candidates:
        console.print(table)
    else:
        console.print("no candidates: the study measures the baseline only")
    if plan.open_ended:
        console.print("  (listed as if no candidate beat the baseline; what is measured can change the later "
                      "ones: OFAT moves on from a value that wins, Optuna samples where it expects gains)")
    duplicates = len(plan.candidates) - len(plan.booting)
    checks = plan.boots - spec.parallel.slots - len(plan.booting) - 2 * spec.finalists
    console.print(f"boots: {plan.boots} ({spec.parallel.slots} baseline(s), {len(plan.booting)} candidate(s), "
                  f"{checks} re-measurement(s) of the baseline, {spec.finalists} finalist(s) each with a fresh "
                  f"baseline); {duplicates} duplicate(s) not booted")
    replicates = (str(spec.replicates.min) if spec.replicates.min == spec.replicates.max
                  else f"{spec.replicates.min}-{spec.replicates.max}")
    console.print(f"runs: about {plan.runs:.0f} ({len(spec.scenarios)} scenario(s) x {replicates} replicate(s) "
                  "a boot)")
    budget = f"; wall-clock budget {spec.budget.wall_minutes:g} min" if spec.budget.wall_minutes else ""
    console.print(f"ETA: {format_duration(plan.eta_s)} before anything is measured ({escape(plan.eta_basis)}"
                  f"{', ' + str(spec.parallel.slots) + ' slots at once' if spec.parallel.slots > 1 else ''})"
                  f"{budget}")
    console.print(escape(stopping.assess(spec, []).line(spec.min_effect_pct)))
    for line in located_lines(load_yaml(study_file), plan.warnings):
        console.print(f"[bold red]warning[/]: {escape(line)}")
    for note in plan.slo_notes:
        console.print(f"[yellow]SLO[/] {escape(note)}")
    if not plan.problems:
        console.print("[green]ready[/]: nothing was started; run it with servetune tune "
                      f"{escape(str(study_file))} --out DIR")


def _print_knobs(plan: StudyPlan) -> None:
    """Each env knob and what will show it applied: one without evidence reads unproven in the report."""
    if not plan.knob_evidence:
        return
    none = [k for k, source in plan.knob_evidence.items() if source is None]
    console.print(f"  knobs:    {len(plan.knob_evidence)} env knob(s), {len(none)} without evidence")
    for knob, source in plan.knob_evidence.items():
        shown = (f"[yellow]no evidence[/]: no rule knows it, its trials read unproven; declare "
                 f"engine.evidence.{escape(knob)} (log, unapplied_log or metric)") if source is None else escape(source)
        console.print(f"            {escape(knob)}: {shown}")


def _flag_lines(plan: StudyPlan) -> list[str]:
    return [msg for _, msg in plan.problems if "has no flag" in msg]
