"""`servetune init STUDY.yaml --model M [--serve-cmd '...'] [--workload ...] [--slo ...]`: a first
study file, commented, that loads and runs."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..capacity.slo import parse_slo
from ..engine.defaults import EngineDefaults
from ..engine.hardware import Gpu, Hardware, detect
from ..engine.profile import Capability
from ..engine.registry import profile_for
from ..errors import ServetuneError
from ..load.scenario import PRESETS
from ..models.source import ModelSource, locate
from ..study.draft import DraftInput, Goal, draft
from ..study.loader import parse_study
from ..study.serve_line import ServeLine, parse_serve_line
from ..study.spec import dotted
from ..study.workload import Workload, summarise
from ..tune.display import format_duration
from ..tune.plan import StudyPlan, assemble
from . import server_options as opt
from .paths import output_file

console = Console()


def init(
    study_file: Path = typer.Argument(..., dir_okay=False, help="the study file to write"),
    model: str | None = typer.Option(None, "--model", "-m",
                                     help="a local model directory or a Hugging Face id (or give --serve-cmd)"),
    serve_cmd: str | None = typer.Option(None, "--serve-cmd", metavar="'vllm serve MODEL ...'",
                                         help="the command line you serve with today (`vllm serve ...`, `docker run "
                                              "... IMAGE ...`) or a compose file (FILE.yaml[:SERVICE]): it becomes "
                                              "the baseline"),
    workload: list[str] = typer.Option(["chat"], "--workload", "-w",
                                       help=f"a scenario preset ({', '.join(PRESETS)}) or a JSONL file of your "
                                            "requests ({prompt} or {input_len, output_len} a line); repeatable"),
    slo: list[str] = typer.Option([], "--slo", metavar="METRIC:STAT=MS",
                                  help="a latency limit every scenario must meet, e.g. ttft:p99=1000; repeatable"),
    goal: str = typer.Option("throughput", "--goal", help="throughput (output tokens/s) or capacity (the "
                             "highest load within the SLOs)"),
    name: str | None = typer.Option(None, "--name", help="the study's name (default: from the model)"),
    gpus: int | None = typer.Option(None, "--gpus", min=0, max=64,
                                    help="write for this many GPUs instead of the ones found here (0: the CPU)"),
    gpu_memory_gib: float = typer.Option(80.0, "--gpu-memory-gib", min=1,
                                         help="with --gpus: each GPU's memory"),
    compute_capability: str | None = typer.Option(None, "--compute-capability", metavar="MAJOR.MINOR",
                                                  help="with --gpus: the GPUs' compute capability (e.g. 9.0)"),
    offline: bool = typer.Option(False, "--offline", help="do not ask the Hugging Face Hub about a model id"),
    force: bool = typer.Option(False, "--force", help="overwrite STUDY_FILE if it exists"),
    engine: str = typer.Option("vllm", "--engine", help=f"the engine to tune: {opt.KINDS}"),
) -> None:
    """Write a commented study file for your model, serve line, workload, SLOs and hardware."""
    output_file(study_file, "STUDY_FILE", force, "YAML", [Path(w) for w in workload])
    if goal not in ("throughput", "capacity"):
        raise ServetuneError(f"--goal {goal!r}: expected throughput or capacity")
    if serve_cmd:
        profile_for(engine).require(Capability.init_from_serve_line, "init --serve-cmd")
    serve = parse_serve_line(serve_cmd) if serve_cmd else None
    model_name = _model_name(model, serve)
    source = locate(model_name, ask_hub=not offline)
    if not source.reachable and source.directory is None and source.config is None:
        console.print(f"[yellow]note[/]: {escape(model_name)}: {escape(source.where)}; the study is written "
                      "anyway, `servetune plan` checks it again")
    hardware = _hardware(gpus, gpu_memory_gib, compute_capability)
    presets, workload_file, summary = _workload(workload, source)
    inp = DraftInput(name=name or _default_name(model_name), model=source, hardware=hardware, serve=serve,
                     presets=presets, workload=summary, workload_path=workload_file,
                     slos=[parse_slo(s) for s in slo], goal=_goal(goal), engine=engine)
    body, _facts = draft(inp)
    spec = parse_study(body, str(study_file))  # what is written loads: checked before writing
    plan = assemble(spec, EngineDefaults(label=spec.engine.profile.label), source, hardware=hardware)
    study_file.parent.mkdir(parents=True, exist_ok=True)
    study_file.write_text(_header(inp, plan, study_file, serve) + body)
    console.print(f"wrote {escape(str(study_file))}: {len(spec.space)} flag(s) to search on "
                  f"{escape(hardware.describe())}, {len(spec.scenarios)} scenario(s); about "
                  f"{plan.boots} boots, {format_duration(plan.eta_s)}")
    for loc, why in plan.warnings:  # the space is cut to the hardware: a serve line's own flags, MTP's prompts
        console.print(f"[bold red]warning[/]: {escape(dotted(loc))}: {escape(why)}")
    console.print(f"next: servetune plan {escape(str(study_file))}   (checks the engine, model and flags; "
                  "starts nothing)")
    console.print(f"then: servetune tune {escape(str(study_file))} --out runs/{escape(spec.name)}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)


def _goal(text: str) -> Goal:
    return "capacity" if text == "capacity" else "throughput"


def _model_name(model: str | None, serve: ServeLine | None) -> str:
    if serve is None:
        if not model:
            raise ServetuneError("--model: give a model directory or a Hugging Face id (or --serve-cmd)")
        return model
    if model and model != serve.model:
        raise ServetuneError(f"--model {model!r} and --serve-cmd's model {serve.model!r} differ; give one")
    return serve.model


def _default_name(model: str) -> str:
    tail = model.rstrip("/").rsplit("/", 1)[-1] or "study"
    return re.sub(r"[^\w.\-]+", "-", tail).lower()


def _hardware(gpus: int | None, memory_gib: float, capability: str | None) -> Hardware:
    if gpus is None:
        return detect()
    cap = None
    if capability is not None:
        major, dot, minor = capability.partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise ServetuneError(f"--compute-capability {capability!r}: expected MAJOR.MINOR, e.g. 9.0")
        cap = (int(major), int(minor))
    gpu = Gpu("GPU (given with --gpus)", memory_gib, cap)
    return Hardware((gpu,) * gpus, 16, "--gpus")


def _workload(items: list[str], source: ModelSource) -> tuple[list[str], Path | None, Workload | None]:
    presets: list[str] = []
    files = [Path(i) for i in items if i not in PRESETS]
    for item in items:
        if item in PRESETS:
            presets.append(item)
    if len(files) > 1:
        raise ServetuneError(f"--workload: one JSONL file at most, got {', '.join(map(str, files))}")
    if not files:
        return presets, None, None
    path = files[0]
    if not path.is_file():
        raise ServetuneError(f"--workload {path}: neither a preset ({', '.join(PRESETS)}) nor a file")
    return presets, path, summarise(path, source.directory)


def _header(inp: DraftInput, plan: StudyPlan, study_file: Path, serve: ServeLine | None) -> str:
    baseline = "your current serve line" if serve else f"{profile_for(inp.engine).label}'s defaults"
    metric = "capacity within the SLOs" if inp.goal == "capacity" else "output tokens/s"
    lines = [
        f"Written by `servetune init` for {inp.model.name} on {inp.hardware.describe()}.",
        f"What it answers: which flags under `space` beat {baseline} on {metric} for the scenarios below,",
        "  each candidate against the baseline with confidence intervals, Holm-corrected; a winner is",
        "  re-validated on a fresh boot before it is named.",
        f"How long: about {format_duration(plan.eta_s)} ({plan.boots} boots, ~{plan.runs:.0f} runs; seeded "
        f"from {plan.eta_basis}); the study re-estimates as it measures.",
        f"Check first: servetune plan {study_file}  (engine, model, flags, candidates; starts nothing)",
        f"Run:         servetune tune {study_file} --out runs/{inp.name}  (again to resume)",
        "What to change: drop `space` entries from the bottom to save boots; `replicates` up for noisy",
        "  hosts; `budget: {wall_minutes: N}` to stop in time; your own traffic with --workload FILE.jsonl.",
    ]
    return "".join(f"# {line}\n" for line in lines)
