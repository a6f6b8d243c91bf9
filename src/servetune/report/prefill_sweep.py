"""A prefill sweep in a report: per boot and sweep scenario, each prompt size's TTFT and prefill
tokens/s (the median over the boot's runs), or how many of its runs timed out at that size."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from ..engine.config import Config
from ..load.sweep import OK, TIMEOUT
from ..store import Trial


@dataclass(frozen=True)
class SweepCell:
    input_len: int
    ttft_ms: float | None          # median over the runs that answered; None: none did
    prefill_tok_s: float | None
    timed_out: int                 # runs in which this size got no first token in time
    runs: int

    @property
    def text(self) -> str:
        if self.ttft_ms is None or self.prefill_tok_s is None:
            return f"timeout ({self.timed_out}/{self.runs})" if self.timed_out else "failed"
        late = f", timeout in {self.timed_out}/{self.runs}" if self.timed_out else ""
        return f"{self.ttft_ms:,.0f} ms, {self.prefill_tok_s:,.0f} tok/s{late}"


@dataclass(frozen=True)
class SweepRow:
    trial: int
    label: str
    scenario: str
    cells: list[SweepCell]


def sweep_rows(trials: list[Trial], base: Config | None) -> list[SweepRow]:
    rows = []
    for t in trials:
        by_scenario: dict[str, list[list[dict[str, Any]]]] = {}
        for run in t.runs:
            sizes = run.summary.get("prefill_sweep")
            if sizes:
                by_scenario.setdefault(run.scenario, []).append(sizes)
        for scenario, runs in by_scenario.items():
            rows.append(SweepRow(t.seq, t.config.label(base) if base is not None else t.config.label(), scenario,
                                 _cells(runs)))
    return rows


def _cells(runs: list[list[dict[str, Any]]]) -> list[SweepCell]:
    cells = []
    for i, first in enumerate(runs[0]):
        at = [sizes[i] for sizes in runs if i < len(sizes)]
        answered = [s for s in at if s["outcome"] == OK]
        cells.append(SweepCell(
            input_len=first["input_len"],
            ttft_ms=median(s["ttft_ms"] for s in answered) if answered else None,
            prefill_tok_s=median(s["prefill_tok_s"] for s in answered) if answered else None,
            timed_out=sum(1 for s in at if s["outcome"] == TIMEOUT), runs=len(at)))
    return cells
