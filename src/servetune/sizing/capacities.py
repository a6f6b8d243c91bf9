"""The capacities a sizing starts from, each config's in requests per second with its interval:
from a capacity search's JSON (`servetune capacity --out`) or from a finished `maximize: capacity`
study (its analysis: each config's capacity across boots, with each boot's search interval).

A trace's capacity is a speed-up of the window the search replayed; in requests per second it is
that speed-up times the window's mean arrival rate (the sizing assumes the traffic to serve has
the window's mix of requests). A closed loop's capacity (users) has no rate: it is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..capacity.slo import Slo, parse_stored
from ..errors import ServetuneError
from ..load import metrics
from ..load.records import RequestRecord
from ..load.scenario import Scenario
from ..load.trace.window import load_replay

if TYPE_CHECKING:
    from ..analysis.types import StudyAnalysis
    from ..store import Trial
    from ..study.spec import StudySpec

NO_POWER = "not measured: these capacities hold no power readings"


@dataclass(frozen=True)
class ConfigCapacity:
    """One config's capacity under its SLOs, as measured, and what a check of it replays."""

    label: str
    load: str                    # rate (req/s) or speedup (x the recorded traffic of the scenario's trace)
    value: float                 # in the load's unit
    low: float
    high: float                  # inf: no level violated an SLO with confidence
    gpus: int                    # GPUs one replica (server) of the config takes
    rps_per_unit: float          # req/s one unit of the load stands for: 1, or the trace window's mean rate
    output_tokens_per_request: float | None
    slos: list[Slo]
    scenario: Scenario           # what the capacity was measured on
    num_prompts: int             # requests a level ran (a trace's: its window's)
    alpha: float
    looks_per_run: int
    binding: str | None = None
    energy_note: str = NO_POWER
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def value_rps(self) -> float:
        return self.value * self.rps_per_unit

    @property
    def low_rps(self) -> float:
        return self.low * self.rps_per_unit

    @property
    def high_rps(self) -> float:
        return self.high * self.rps_per_unit


def window_rate(scenario: Scenario, where: str) -> float:
    """Requests per second of the recorded traffic a trace scenario replays at speed-up 1."""
    if scenario.trace is None:
        raise ServetuneError(f"{where}: a speed-up capacity without a trace scenario")
    replay = load_replay(scenario.trace)
    span = replay.span_s if replay.span_s > 0 else max(r.offset_s for r in replay.requests)
    if span <= 0:
        raise ServetuneError(f"{where}: the trace window {scenario.trace.file} spans no time; no rate to size by")
    return len(replay.requests) / span


def _rps_per_unit(load: str, scenario: Scenario, where: str) -> float:
    if load == "rate":
        return 1.0
    if load == "speedup":
        return window_rate(scenario, where)
    raise ServetuneError(f"{where}: a capacity of --load {load} (concurrent users) has no request rate to size "
                         "by; size from a capacity measured as a rate or a trace's speed-up")


def from_document(path: Path, gpus: int) -> ConfigCapacity:
    """The capacity a `servetune capacity` JSON holds; a ServetuneError naming the file and key
    otherwise (not a capacity result, a search that found none, a closed loop's)."""
    where = str(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ServetuneError(f"{where}: cannot read a capacity result from it ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("capacity"), dict) or "load" not in doc:
        raise ServetuneError(f"{where}: not a capacity result (no 'capacity' and 'load'); "
                             "give the JSON `servetune capacity --out` wrote, or a study directory")
    cap = doc["capacity"]
    if doc.get("status") != "complete":
        raise ServetuneError(f"{where}: the search is {doc.get('status')!r}, not complete; finish it with "
                             "`servetune capacity --resume` first")
    try:
        scenario = Scenario.model_validate(doc["scenario"])
        slos = [parse_stored(s) for s in doc["slos"]]
        value, low = float(cap["value"]), float(cap["low"])
        high = math.inf if cap.get("high") is None else float(cap["high"])
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise ServetuneError(f"{where}: a capacity result with a missing or unreadable field ({exc})") from None
    if value <= 0:
        raise ServetuneError(f"{where}: the capacity is 0 (the SLOs failed at every level); nothing to size")
    load = str(doc["load"])
    return ConfigCapacity(
        label=str(doc.get("url") or doc.get("serve") or path.stem), load=load, value=value, low=low, high=high,
        gpus=gpus, rps_per_unit=_rps_per_unit(load, scenario, f"{where}: load"),
        output_tokens_per_request=_tokens_per_request(doc), slos=slos, scenario=scenario,
        num_prompts=int(doc.get("num_prompts") or scenario.num_prompts or 0), alpha=float(doc.get("alpha", 0.05)),
        looks_per_run=int(doc.get("looks_per_run", 1)), binding=cap.get("binding"), source={"capacity": where})


def _tokens_per_request(doc: dict[str, Any]) -> float | None:
    """Mean output tokens of the search's succeeded requests (its run records): the scenario's
    lengths, whatever the load."""
    counts: list[int] = []
    for level in doc.get("levels") or []:
        for run in level.get("run_files") or []:
            records = Path(run["records"]) if run.get("records") else None
            if records is None or not records.is_file():
                continue
            for line in records.read_text().splitlines():
                if line.strip():
                    rec = RequestRecord.model_validate_json(line)
                    if not rec.warmup and metrics.succeeded(rec):
                        counts.append(metrics.output_len(rec))
    return fmean(counts) if counts else None


def from_study(spec: StudySpec, analysis: StudyAnalysis, trials: Sequence[Trial], where: str,
               scenario_name: str | None) -> list[ConfigCapacity]:
    """Every measured config's capacity of one scenario of a `maximize: capacity` study. A config
    of several boots: the point is the mean over boots, the interval the widest of the across-boots
    interval and the boots' own search intervals (each boot's search uncertainty kept)."""
    from ..analysis.capacity_runs import current_capacity_runs, load_kind
    from ..engine.placement import server_gpus
    from ..study.metrics import CAPACITY
    from ..study.objective import Objective

    objective = Objective(spec)
    if not objective.is_capacity:
        raise ServetuneError(f"{where}: the study maximises {objective.metric}, not capacity; sizing needs capacities")
    runs_by_trial = {t.id: list(t.runs) for t in trials}
    scored = objective.scored_scenarios
    name = scenario_name or (scored[0] if len(scored) == 1 else None)
    if name is None or name not in scored:
        raise ServetuneError(f"--scenario {scenario_name!r}: name one of the study's scored scenarios: "
                             f"{', '.join(scored)}" if scenario_name else
                             f"--scenario: the study has several scenarios; name one of {', '.join(scored)}")
    scenario = next(s for s in spec.scenarios if s.name == name)
    load = load_kind(scenario)
    where = f"{where}: scenario {name}"
    per_unit = _rps_per_unit(load, scenario, where)
    out = []
    for c in analysis.configs:
        result = c.scenarios.get(name)
        runs = current_capacity_runs([r for t in c.trial_ids for r in runs_by_trial.get(t, [])], name)
        est = result.metrics.get(CAPACITY) if result else None
        if est is None or not runs or not math.isfinite(est.estimate) or est.estimate <= 0:
            continue
        lows = [float(r.summary.get("capacity_low") or 0.0) for r in runs]
        highs = [math.inf if r.summary.get("capacity_high") is None else float(r.summary["capacity_high"])
                 for r in runs]
        low, high = min(lows), max(highs)
        if len(runs) > 1 and math.isfinite(est.low) and math.isfinite(est.high):
            low, high = min(low, est.low), max(high, est.high)
        served = [r.summary["output_throughput_at_capacity"] for r in runs
                  if r.summary.get("output_throughput_at_capacity")]
        rps = est.estimate * per_unit
        label = c.label if c.is_baseline or analysis.baseline is None else c.config.label(analysis.baseline.config)
        out.append(ConfigCapacity(
            label=label, load=load, value=est.estimate, low=low, high=high, gpus=server_gpus(c.config),
            rps_per_unit=per_unit, output_tokens_per_request=fmean(served) / rps if served else None,
            slos=objective.capacity_slos(name), scenario=scenario, num_prompts=spec.capacity.num_prompts,
            alpha=spec.alpha, looks_per_run=spec.capacity.looks_per_run,
            binding=runs[-1].summary.get("capacity_binding"),
            source={"study": where, "scenario": name, "boots": len(runs)}))
    if not out:
        raise ServetuneError(f"{where}: no config has a capacity above 0 to size from")
    return out
