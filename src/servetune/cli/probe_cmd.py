"""`servetune probe context`, `probe utilization` and `probe memory`: one question each, answered by booting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engine import Engine, build_engine, engine_for
from ..engine.applied import as_number
from ..engine.config import Config
from ..engine.profile import Capability
from ..errors import NoResult, ServetuneError
from ..load.scenario import PRESETS, Scenario
from ..machine import checked_record
from ..probe.context import ContextAnswer, ProbeBoot, check_start, engine_boot, find_max_model_len, model_max_len
from ..probe.measure import measure
from ..probe.memory import MemoryVerdict, judge, scenario_need
from ..probe.utilization import (
    FLAG,
    UtilizationAnswer,
    UtilizationBoot,
    check_range,
    engine_utilization_boot,
    find_max_utilization,
)
from ..study.loader import load_study
from . import server_options as opt
from . import validate
from .bench_cmd import build_scenario
from .boundary import EXIT_NO_RESULT, on_interrupt
from .paths import output_file, result_file, writable_dir
from .serve_cmd import flags_from_argv

console = Console()
_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}

# The options the probes that bisect over boots (context, utilization) share, declared once.
ProbeModel = Annotated[str, typer.Option("--model", help="model directory or name")]
MaxBoots = Annotated[int, typer.Option("--max-boots", min=1, help="boots at most")]
BaseCommand = Annotated[str | None, typer.Option("--command",
                                                 help="base command (default: the engine's launcher module)")]
StartupTimeout = Annotated[float, typer.Option("--startup-timeout", help="seconds until /health must be 200")]
LogDir = Annotated[Path, typer.Option("--log-dir", help="where the server logs go")]
OutJson = Annotated[Path | None, typer.Option("--out", help="write the answer and every boot as JSON here")]


def _boot_line(b: ProbeBoot) -> str:
    asked = "auto (-1)" if b.requested < 0 else str(b.requested)
    if b.ok:
        said = f"ok at {b.ran_at}: KV cache {b.kv_cache_tokens or '?'} tokens"
        if b.max_concurrency is not None:
            said += f", max concurrency {b.max_concurrency:.2f}x for {b.max_concurrency_tokens} tokens"
    else:
        said = f"{b.outcome}" + (f": vLLM estimates {b.estimate} fits" if b.estimate else f": {b.detail[:160]}")
    return f"--max-model-len {asked} ({b.why}): {said}"


def context_verdict(answer: ContextAnswer) -> str:
    if answer.max_model_len is None:
        return f"no max-model-len found: {answer.reason}"
    how = {"auto-fit": "vLLM's automatic max-model-len", "estimate": "vLLM's estimate after a boot that did not fit",
           "concurrency": "the 'Maximum concurrency' line (X·Y tokens)", "bisection": "bisection",
           "start": "the length asked first", "model maximum": "the model's maximum length"}.get(answer.source,
                                                                                                  answer.source)
    check = "confirmed by a boot at exactly that length" if answer.confirmed else "NOT confirmed by a boot"
    line = f"max-model-len {answer.max_model_len} fits (from {how}; {check})"
    if answer.model_max is not None and answer.max_model_len >= answer.model_max:
        line += f"; that is the model's own maximum ({answer.model_max})"
    if answer.kv_cache_tokens is not None:
        line += f"; KV cache {answer.kv_cache_tokens:,} tokens"
    if answer.max_concurrency is not None:
        line += f", max concurrency {answer.max_concurrency:.2f}x at {answer.max_model_len:,} tokens a request"
    return line


def _needs_table(verdict: MemoryVerdict) -> Table:
    table = Table(title="KV cache under the scenarios (one run each)")
    for col in ("scenario", "preemptions", "peak KV usage", "peak running / waiting", "KV tokens needed", "from"):
        table.add_column(col, overflow="fold")
    for n in verdict.scenarios:
        table.add_row(n.scenario, "-" if n.preemptions is None else f"{n.preemptions:g}",
                      "-" if n.kv_usage_peak is None else f"{n.kv_usage_peak * 100:.3g} %",
                      f"{_g(n.running_peak)} / {_g(n.waiting_peak)}",
                      "-" if n.needed_tokens is None else f"{n.needed_tokens:,}", escape(n.basis))
    return table


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _engine_flags(ctx: typer.Context) -> Config:
    return Config.of(flags_from_argv(list(ctx.args)))


def _scenarios(names: list[str]) -> list[Scenario]:
    return [build_scenario(name) for name in names]


def context(
    ctx: typer.Context,
    model: ProbeModel,
    start: int | None = typer.Option(None, "--start", help="first max-model-len to try (default: vLLM's "
                                     "automatic length, then the model's maximum)"),
    tolerance: int = typer.Option(256, "--tolerance", min=1, help="bisection stops this many tokens apart"),
    max_boots: MaxBoots = 8,
    command: BaseCommand = None,
    startup_timeout: StartupTimeout = 900.0,
    log_dir: LogDir = Path("runs/probe"),
    out: OutJson = None,
    force: opt.Force = False,
    allow_busy: opt.AllowBusy = False,
    engine_kind: opt.EngineKind = "vllm",
) -> None:
    """The largest --max-model-len that fits the memory flags after `--`: vLLM's own answers first
    (automatic length, its estimate, the max-concurrency line), confirmed by a boot at the answer."""
    check_start(start)
    validate.tokens(start, "--start")
    validate.tokens(tolerance, "--tolerance")
    validate.count(max_boots, "--max-boots", high=1000)
    base = validate.command(command)
    validate.seconds(startup_timeout, "--startup-timeout")
    config = _engine_flags(ctx)
    if "max-model-len" in config.flags:
        raise ServetuneError("probe context sets --max-model-len itself; leave it out of the engine flags")
    if out is not None:
        output_file(out, "--out", force, "JSON")  # now, not after minutes of boots
    writable_dir(log_dir, "--log-dir")
    on_interrupt(f"nothing written{f' to {out}' if out else ''}; the server logs are under {log_dir}")
    engine = build_engine(engine_kind, base, model, startup_timeout_s=startup_timeout, log_dir=log_dir,
                          needs=Capability.context_probe, where="probe context")
    checked_record(None, allow_busy=allow_busy, where="probe context")
    console.print(f"probing the context of {model} (server logs in {log_dir}) ...")
    answer = find_max_model_len(engine_boot(engine, config, log_dir), model_max=model_max_len(model), start=start,
                                tolerance=tolerance, max_boots=max_boots,
                                on_boot=lambda b: console.print("  " + _boot_line(b), markup=False,
                                                                highlight=False))
    if out is not None:
        out.write_text(json.dumps(answer.model_dump(mode="json"), indent=2))
    console.print(context_verdict(answer), style="bold" if answer.max_model_len else "bold red",
                  markup=False, highlight=False)
    if answer.max_model_len is None:
        raise typer.Exit(EXIT_NO_RESULT)


def _utilization_line(b: UtilizationBoot) -> str:
    if b.ok:
        said = f"ok: KV cache {b.kv_cache_tokens or '?'} tokens" + (
            f", {b.kv_cache_memory_gib:g} GiB" if b.kv_cache_memory_gib is not None else "")
    else:
        said = f"{b.outcome}" + (f": {b.free_share:.4f} of the memory was free" if b.free_share is not None
                                 else f": {b.detail[:160]}")
    return f"--{FLAG} {b.requested:g} ({b.why}): {said}"


def utilization_verdict(answer: UtilizationAnswer) -> str:
    if answer.gpu_memory_utilization is None:
        return f"no {FLAG} found: {answer.reason}"
    how = {"start": "the value asked first", "free memory": "the free memory vLLM reported",
           "bisection": "bisection"}.get(answer.source, answer.source)
    line = f"{FLAG} {answer.gpu_memory_utilization:g} boots (found by {how}; a boot at exactly that value)"
    if answer.kv_cache_tokens is not None:
        line += f"; KV cache {answer.kv_cache_tokens:,} tokens"
    return line + "; what else uses the device counts: measure with it as it will be when serving"


def utilization(
    ctx: typer.Context,
    model: ProbeModel,
    start: float = typer.Option(0.95, "--start", help=f"the highest --{FLAG} to try (booted first)"),
    low: float = typer.Option(0.5, "--low", help="the lowest value the bisection goes down to"),
    step: float = typer.Option(0.001, "--step", help="the answer's resolution"),
    max_boots: MaxBoots = 8,
    command: BaseCommand = None,
    startup_timeout: StartupTimeout = 900.0,
    log_dir: LogDir = Path("runs/probe"),
    out: OutJson = None,
    force: opt.Force = False,
    allow_busy: opt.AllowBusy = False,
    engine_kind: opt.EngineKind = "vllm",
) -> None:
    """The highest --gpu-memory-utilization that boots with the flags after `--`, on this device as it
    is now: vLLM's free-memory numbers first, bisection where a boot fails without them."""
    check_range(start, low, step)
    validate.count(max_boots, "--max-boots", high=1000)
    base = validate.command(command)
    validate.seconds(startup_timeout, "--startup-timeout")
    config = _engine_flags(ctx)
    if FLAG in config.flags:
        raise ServetuneError(f"probe utilization sets --{FLAG} itself; leave it out of the engine flags")
    if out is not None:
        output_file(out, "--out", force, "JSON")  # now, not after minutes of boots
    writable_dir(log_dir, "--log-dir")
    # Another tenant is what makes this answer differ from the GPU's size: the user says it is meant.
    checked_record(None, allow_busy=allow_busy, where="probe utilization")
    on_interrupt(f"nothing written{f' to {out}' if out else ''}; the server logs are under {log_dir}")
    engine = build_engine(engine_kind, base, model, startup_timeout_s=startup_timeout, log_dir=log_dir,
                          needs=Capability.utilization_probe, where="probe utilization")
    console.print(f"probing the highest --{FLAG} for {model} (server logs in {log_dir}) ...")
    answer = find_max_utilization(engine_utilization_boot(engine, config, log_dir), start=start, low=low, step=step,
                                  max_boots=max_boots, on_boot=lambda b: console.print(
                                      "  " + _utilization_line(b), markup=False, highlight=False))
    if out is not None:
        out.write_text(json.dumps(answer.model_dump(mode="json"), indent=2))
    console.print(utilization_verdict(answer), style="bold" if answer.gpu_memory_utilization else "bold red",
                  markup=False, highlight=False)
    if answer.gpu_memory_utilization is None:
        raise typer.Exit(EXIT_NO_RESULT)


def memory(
    ctx: typer.Context,
    study: Path | None = typer.Argument(None, help="study file: its engine, baseline flags and scenarios"),
    model: str | None = typer.Option(None, "--model", help="model directory (without a study file)"),
    scenario: list[str] = typer.Option([], "--scenario", help=f"preset to run (repeatable): {', '.join(PRESETS)}"),
    device_memory_gib: float | None = typer.Option(None, "--device-memory-gib", min=0.001,
                                                   help="the accelerator's memory, to express the pool as "
                                                        "--gpu-memory-utilization"),
    out: Path = typer.Option(Path("runs/probe-memory"), "--out", help="directory for logs, runs and memory.json"),
    command: str | None = typer.Option(None, "--command", help="base command without a study file (default: "
                                       "the engine's launcher module)"),
    startup_timeout: float = typer.Option(900.0, "--startup-timeout", help="seconds until /health must be 200"),
    force: bool = typer.Option(False, "--force", help="overwrite an earlier memory.json in --out"),
    allow_busy: opt.AllowBusy = False,
    engine_kind: opt.EngineKind = "vllm",
) -> None:
    """Run the scenarios once on one server and say whether the KV cache memory should go up, down or
    stay, with the smallest --kv-cache-memory-bytes that keeps preemptions at zero at that load."""
    validate.seconds(startup_timeout, "--startup-timeout")
    validate.number(device_memory_gib, "--device-memory-gib", low=0, high=1e6, low_open=True)
    base = validate.command(command)
    extra = _engine_flags(ctx)
    if study is not None:
        spec = load_study(study)
        spec.engine.profile.require(Capability.memory_probe, "probe memory")
        engine: Engine = engine_for(spec.engine)  # the study's engine, as `tune` builds it
        engine.check_secrets()
        config, model_dir = spec.baseline_config().merged(extra), str(spec.engine.model)
        scenarios = _scenarios(scenario) if scenario else list(spec.scenarios)
    else:
        if model is None or not scenario:
            raise ServetuneError("give a study file, or --model DIR and at least one --scenario")
        engine = build_engine(engine_kind, base, model, startup_timeout_s=startup_timeout, log_dir=out / "logs",
                              dev_mode=True, needs=Capability.memory_probe, where="probe memory")
        config, model_dir, scenarios = extra, model, _scenarios(scenario)
    if out.exists() and not out.is_dir():
        raise ServetuneError(f"--out {out}: exists and is not a directory")
    result_file(out / "memory.json", "--out", force)
    writable_dir(out, "--out")
    on_interrupt(f"nothing written to {out / 'memory.json'}; the logs and runs so far are under {out}")
    tokenizer = Path(model_dir) if (Path(model_dir) / "tokenizer.json").is_file() else None
    checked_record(None, allow_busy=allow_busy, where="probe memory")
    console.print(f"booting {model_dir} and running {', '.join(s.name for s in scenarios)} once each ...")
    measured = measure(engine, config, scenarios, out, tokenizer, "memory")
    if measured.error and not measured.runs:  # ran, measured nothing: as `probe context` without an answer
        raise NoResult(f"{measured.error}; nothing written to {out / 'memory.json'}")
    facts = measured.start.boot_facts
    max_num_seqs = as_number(config.flags.get("max-num-seqs"))
    clients = {s.name: s.concurrency for s in scenarios}
    needs = [scenario_need(r.scenario, r.server_stats, r.summary, facts.kv_cache_tokens, max_num_seqs,
                           clients.get(r.scenario)) for r in measured.runs]
    verdict = judge(needs, facts, config, device_memory_gib)
    (out / "memory.json").write_text(json.dumps(verdict.model_dump(mode="json"), indent=2))
    console.print(_needs_table(verdict))
    if measured.error:
        console.print(f"[yellow]{escape(measured.error)}[/]")
    console.print(f"memory: {verdict.text}", style="bold", markup=False, highlight=False)
    console.print(escape(f"wrote {out / 'memory.json'}"))
    if verdict.direction == "unknown":
        raise typer.Exit(EXIT_NO_RESULT)


def register(app: typer.Typer) -> None:
    probe_app = typer.Typer(help="One-question probes: the longest context that fits, the highest memory share "
                            "that boots, the KV memory a load needs.", no_args_is_help=True)
    probe_app.command("context", context_settings=_EXTRA)(context)
    probe_app.command("utilization", context_settings=_EXTRA)(utilization)
    probe_app.command("memory", context_settings=_EXTRA)(memory)
    app.add_typer(probe_app, name="probe")
