"""`servetune size`: the replicas, GPUs and cost each config needs for a target load, from
measured capacities; `--check` replays one replica's share against a server."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ServetuneError
from ..sizing.balance import BALANCES, Balance
from ..sizing.capacities import ConfigCapacity, from_document, from_study
from ..sizing.plan import Sizing, size
from ..sizing.target import Target, rate_target, trace_target
from . import server_options as opt
from . import validate
from .bench_cmd import api_key_from_env
from .boundary import EXIT_NO_RESULT, print_error
from .paths import companion_dir, output_file, runs_dir_of
from .server_check import check_reachable
from .trace_options import TRACE_SET_HELP, trace_spec

console = Console()


def size_cmd(
    source: Path = typer.Argument(..., help="a capacity result (the JSON `servetune capacity --out` wrote) or a "
                                            "study directory of a `maximize: capacity` study"),
    rate: float | None = typer.Option(None, "--rate", help="the target: requests per second to serve"),
    trace: Path | None = typer.Option(None, "--trace", help="the target: this trace's busy minute (--percentile); "
                                      "a trace capacity's own trace when neither --rate nor --trace is given"),
    trace_set: list[str] = typer.Option([], "--trace-set", help=TRACE_SET_HELP),
    percentile: float = typer.Option(100.0, "--percentile", help="which minute of the trace: the pNN of its "
                                     "per-minute arrival counts (100: the busiest)"),
    growth: float = typer.Option(1.0, "--growth", help="the target times this (the traffic's growth)"),
    price: float | None = typer.Option(None, "--price-per-gpu-hour",
                                       help="what one GPU costs an hour (default: a study's price_per_gpu_hour)"),
    gpus: int = typer.Option(1, "--gpus-per-replica", min=1,
                             help="GPUs one server of a capacity result takes (a study knows each config's)"),
    scenario: str | None = typer.Option(None, "--scenario", help="a study's scenario (default: its only scored one)"),
    out: Path | None = typer.Option(None, "--out", help="write the sizing as JSON, named exactly so "
                                    "(with --check, the check's run beside it: res.json -> res.runs/)"),
    check: bool = typer.Option(False, "--check", help="replay one replica's share against --url and judge the SLOs"),
    url: opt.Url = None,
    model: opt.ServedModel = None,
    tokenizer: opt.Tokenizer = None,
    balance: str = typer.Option("round-robin", "--balance", help="how a trace's requests are dealt to replicas: "
                                "round-robin, or session (a conversation, a long shared prefix, on one replica)"),
    config: str | None = typer.Option(None, "--config", help="the config to check (default: the fewest GPUs)"),
    replicas: int | None = typer.Option(None, "--replicas", min=1,
                                        help="check this many replicas instead of the sized count"),
    connect_timeout: opt.ConnectTimeout = None,
    first_byte_timeout: opt.FirstByteTimeout = None,
    api_key_env: opt.ApiKeyEnv = None,
    force: opt.Force = False,
) -> None:
    """How many replicas (and GPUs) each config needs for the target, with the interval its
    capacity's interval gives, and the cost; with --check, one replica's share measured."""
    chosen_balance = _check_options(rate, trace, percentile, growth, price, balance, check, url, out)
    if not check and (replicas is not None or config is not None):
        raise ServetuneError(f"{'--replicas' if replicas is not None else '--config'} chooses what --check measures; "
                             "give --check too")
    tokenizer = validate.tokenizer_dir(tokenizer)
    runs_dir = None
    if out is not None:  # before anything is read: a bad name costs nothing
        output_file(out, "--out", force, "JSON", [source, trace])
        if check:
            runs_dir = companion_dir(runs_dir_of(out), "--out", force)
    capacities, study_price = _capacities(source, scenario, gpus)
    price = price if price is not None else study_price
    target = _target(capacities[0], rate, trace, trace_set, percentile, growth)
    sizings = sorted((size(c, target.rps, price) for c in capacities), key=lambda s: (s.gpus, -s.capacity.value_rps))
    console.print(escape(f"target: {target.described}"))
    console.print(_table(sizings))
    console.print(escape(f"energy per output token: {capacities[0].energy_note}"))
    doc: dict[str, Any] = {"source": str(source), "target": target.to_dict(),
                           "balance": chosen_balance if check and target.window is not None else None,
                           "price_per_gpu_hour": price, "configs": [s.to_dict() for s in sizings]}
    failed = None
    if check:
        assert url is not None and runs_dir is not None and out is not None
        sizing = _checked(sizings, config)
        n = replicas or sizing.replicas
        if not math.isfinite(n):
            raise ServetuneError(f"--check: {sizing.capacity.label} has no finite replica count to check")
        result = _run_check(url, sizing, target, int(n), chosen_balance, runs_dir, model, tokenizer, api_key_env,
                            connect_timeout, first_byte_timeout)
        doc["check"] = result.to_dict()
        failed = _show_check(result)
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
        console.print(escape(f"wrote {out}"))
    if failed:
        print_error(failed)
        raise typer.Exit(EXIT_NO_RESULT)


def _check_options(rate: float | None, trace: Path | None, percentile: float, growth: float, price: float | None,
                   balance: str, check: bool, url: str | None, out: Path | None) -> Balance:
    """Refused before anything is read or measured (bad input, exit 2)."""
    if rate is not None and trace is not None:
        raise ServetuneError("give --rate or --trace as the target, not both")
    validate.number(rate, "--rate", low=0, low_open=True)
    validate.number(growth, "--growth", low=0, low_open=True)
    validate.number(percentile, "--percentile", low=0, high=100, low_open=True)
    validate.number(price, "--price-per-gpu-hour", low=0, low_open=True)
    if balance not in BALANCES:
        raise ServetuneError(f"--balance {balance!r}: expected {' or '.join(BALANCES)}")
    if check:
        if url is None:
            raise ServetuneError("--check needs --url: the server one replica's share is replayed against")
        validate.url(url)
        if out is None:
            raise ServetuneError("--check needs --out: the check's run is kept beside it")
    elif url is not None:
        raise ServetuneError("--url is the server of --check; give --check too")
    return balance


def _capacities(source: Path, scenario: str | None, gpus: int) -> tuple[list[ConfigCapacity], float | None]:
    """The capacities of SOURCE and the study's GPU price (None for a capacity result)."""
    if source.is_dir():
        from ..analysis.analysis import analyze
        from .stored_study import stored_study

        with stored_study(source) as (store, spec):
            capacities = from_study(spec, analyze(store, spec), store.trials(), str(source), scenario)
        return capacities, spec.price_per_gpu_hour
    if not source.is_file():
        raise ServetuneError(f"{source}: no such file or study directory")
    if scenario is not None:
        raise ServetuneError("--scenario names a study's scenario; a capacity result holds one")
    return [from_document(source, gpus)], None


def _target(capacity: ConfigCapacity, rate: float | None, trace: Path | None, trace_set: list[str],
            percentile: float, growth: float) -> Target:
    if rate is not None:
        return rate_target(rate, growth)
    if trace is not None:
        return trace_target(trace_spec(trace, trace_set), percentile, growth)
    if capacity.scenario.trace is None:
        raise ServetuneError("give a target: --rate REQ_PER_S or --trace FILE (a capacity measured on a trace "
                             "can be sized for that trace with --growth alone)")
    whole = capacity.scenario.trace.model_copy(update={"start_s": 0.0, "duration_s": None})
    return trace_target(whole, percentile, growth)


def _table(sizings: list[Sizing]) -> Table:
    table = Table(title="replicas for the target (interval: from the capacity's)")
    for head in ("config", "capacity (req/s)", "replicas", "GPUs", "$/hour", "$/M output tokens"):
        table.add_column(head)
    for s in sizings:
        c = s.capacity
        table.add_row(escape(c.label), f"{c.value_rps:.4g} [{c.low_rps:.4g}, {_g(c.high_rps)}]",
                      f"{_g(s.replicas)} [{_g(s.replicas_low)}, {_g(s.replicas_high)}]", _g(s.gpus),
                      _money(s.usd_per_hour), _money(s.usd_per_million_output_tokens))
    return table


def _checked(sizings: list[Sizing], config: str | None) -> Sizing:
    if config is None:
        return sizings[0]
    match = [s for s in sizings if s.capacity.label == config]
    if not match:
        raise ServetuneError(f"--config {config!r}: not among {', '.join(s.capacity.label for s in sizings)}")
    return match[0]


def _run_check(url: str, sizing: Sizing, target: Target, n: int, balance: Balance, runs_dir: Path,
               model: str | None, tokenizer: Path | None, api_key_env: str | None,
               connect_timeout: float | None, first_byte_timeout: float | None) -> Any:
    from ..sizing.check import Server, check

    api_key = api_key_from_env(api_key_env)
    check_reachable(url, api_key, console, connect_timeout_s=connect_timeout, first_byte_timeout_s=first_byte_timeout)
    console.print(escape(f"check: {sizing.capacity.label}, 1/{n} of the target on one replica ..."))
    return check(Server(url, model, api_key, tokenizer), sizing.capacity, target, n, balance, runs_dir)


def _show_check(result: Any) -> str | None:
    """The check's lines; the error line when it failed (exit 1), else None."""
    console.print(escape(f"check: {result.load}"))
    for note in result.notes:
        console.print(escape(f"  note: {note}"))
    if result.level is None:
        return f"check: the replica's run did not measure ({result.error}); no check result"
    for j in result.level.judgements:
        console.print(escape(f"  {j.slo}: {j.estimate:.4g} ms [{j.low:.4g}, {j.high:.4g}] {j.verdict.value}"))
    words = {"meets": "passed: every SLO met with confidence",
             "undecided": "passed: no SLO shown broken (undecided: the share sits near the limit)",
             "violates": "FAILED: an SLO is broken at this share"}
    console.print(escape(f"check {words[result.level.verdict.value]} ({result.level.completed} requests judged)"))
    return None if result.passed else f"check failed: {result.config} needs more than {result.replicas} replicas"


def _g(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "∞"


def _money(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def register(app: typer.Typer) -> None:
    app.command("size")(size_cmd)
