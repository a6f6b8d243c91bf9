"""Replay fidelity in a report: per trial and scenario, how late its runs sent against their
schedule, how many prompts and answers missed their token counts (the server's usage), and for
a trace the prefix-cache hit rate its requests imply (an unbounded cache, and the boot's KV pool
replayed) against the one the server counted."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean, median

from ..engine.config import Config
from ..store import Run, Trial


@dataclass(frozen=True)
class FidelityRow:
    trial: int
    label: str
    scenario: str
    runs: int
    lateness_p50_ms: float      # the median run's
    lateness_p99_ms: float      # the worst run's
    lateness_max_ms: float
    prompts_off: str            # "0 of 1200"
    answers_off: str            # "-" where the runs did not check (not a trace)
    hit_implied: float | None   # mean over the runs
    hit_pool: float | None      # mean over the runs, None unless every run has it (older runs lack it)
    hit_measured: float | None


def _off(runs: list[Run], key: str) -> str:
    checked = [r.summary.get(f"{key}_checked") for r in runs]
    if any(c is None for c in checked):
        return "-"
    return f"{sum(r.summary.get(f'{key}_mismatched') or 0 for r in runs)} of {sum(c or 0 for c in checked)}"


def _mean(runs: list[Run], key: str) -> float | None:
    values = [v for r in runs if (v := r.summary.get(key)) is not None]
    return fmean(values) if values else None


def _mean_of_all(runs: list[Run], key: str) -> float | None:
    values = [r.summary.get(key) for r in runs]
    return fmean(values) if values and None not in values else None


def fidelity_rows(trials: list[Trial], base: Config | None) -> list[FidelityRow]:
    rows = []
    for t in trials:
        by_scenario: dict[str, list[Run]] = {}
        for run in t.runs:
            if run.summary.get("send_lateness_p99_ms") is not None:
                by_scenario.setdefault(run.scenario, []).append(run)
        for scenario, runs in by_scenario.items():
            rows.append(FidelityRow(
                trial=t.seq, label=t.config.label(base) if base is not None else t.config.label(),
                scenario=scenario, runs=len(runs),
                lateness_p50_ms=median(r.summary["send_lateness_p50_ms"] for r in runs),
                lateness_p99_ms=max(r.summary["send_lateness_p99_ms"] for r in runs),
                lateness_max_ms=max(r.summary["send_lateness_max_ms"] for r in runs),
                prompts_off=_off(runs, "prompt_tokens"), answers_off=_off(runs, "output_tokens"),
                hit_implied=_mean(runs, "prefix_hit_rate_implied"),
                hit_pool=_mean_of_all(runs, "prefix_hit_rate_pool"),
                hit_measured=_mean(runs, "prefix_hit_rate_measured")))
    return rows
