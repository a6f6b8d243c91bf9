"""The protocol run against one server: each phase a Run through `load.run_scenario` (files under
`out_dir`), the short requests' per-request TTFT and TPOT kept for the analysis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..capacity.http import request_values
from ..load.bench import run_scenario
from ..load.options import RunOptions
from ..report.requests import read_records
from ..vocabulary import Outcome
from .analysis import METRICS
from .protocol import DriftProtocol, Phase


@dataclass
class PhaseRun:
    phase: Phase
    values: dict[str, list[float]]            # metric -> ms per successful request, in order
    requests: int
    failed: int
    run_path: str | None


@dataclass
class DriftRun:
    runs: list[PhaseRun] = field(default_factory=list)
    error: str | None = None                  # why the protocol stopped early

    def short_values(self) -> dict[str, dict[str, list[float]]]:
        return {r.phase.name: r.values for r in self.runs if r.phase.kind == "short"}

    def after_long(self) -> dict[str, int]:
        return {r.phase.name: r.phase.after_long for r in self.runs}


def run_protocol(url: str, protocol: DriftProtocol, out_dir: Path, *, model: str | None = None,
                 tokenizer_dir: Path | None = None, api_key: str | None = None,
                 on_phase: Callable[[Phase], None] | None = None) -> DriftRun:
    """Every phase in order; a phase that could not measure (server gone, every request failed)
    ends the protocol with `error` set, keeping what was measured before."""
    result = DriftRun()
    for phase in protocol.phases():
        if on_phase:
            on_phase(phase)
        run = run_scenario(url, model, protocol.scenario(phase), RunOptions(
            tokenizer_dir=tokenizer_dir, out_dir=out_dir, run_id=f"phase{phase.index:02d}-{phase.name}",
            api_key=api_key))
        if run.outcome not in (Outcome.ok, Outcome.client_bound) or run.records_path is None:
            result.error = f"{phase.name}: {run.outcome.value}: {run.error}"
            return result
        measured = [r for r in read_records(Path(run.records_path)) if not r.warmup]
        per_request = request_values(measured)
        values = {m: [float(a[0]) for a in per_request[m]] for m in METRICS}
        result.runs.append(PhaseRun(phase, values, len(measured), len(measured) - len(per_request["ttft"]),
                                    str(out_dir / f"phase{phase.index:02d}-{phase.name}.json")))
    return result
