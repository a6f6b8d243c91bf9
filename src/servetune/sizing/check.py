"""The check of a sizing: one replica's share of the load replayed against a server, judged as
a capacity level is judged (capacity/levels.py, capacity/slo.py), so that the SLOs are shown to
hold at the sized replica count, measured, not assumed.

With a trace target the share is the busy window's requests dealt to the replicas by the chosen
balancing (balance.py), the busiest replica's share replayed at its recorded times (times the
growth); with a rate target it is the capacity's own scenario at target / replicas.

The verdict is a level's: `meets` (every SLO met with confidence), `violates` (one broken with
confidence: the sizing fails), `undecided` (neither: a share at the capacity's point sits on the
limit, where no run of that length can tell). The check passes unless it shows an SLO broken.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capacity.http import LoadKind, measure_level
from ..capacity.levels import LevelResult, judge_level
from ..capacity.sequential import Looks
from ..capacity.slo import Verdict, requests_to_meet
from ..load.scenario import Scenario
from ..load.trace.cut import write_mooncake
from ..load.trace.spec import TraceSpec
from ..load.trace.window import load_replay
from .balance import Balance, shares
from .capacities import ConfigCapacity
from .target import Target


@dataclass
class CheckResult:
    config: str
    replicas: int
    balance: Balance | None        # None: a rate target, no requests to deal
    load: str                      # what the replica was given, in words
    requests: int                  # requests of the replica's share
    level: LevelResult | None      # None: the run could not measure
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict | None:
        return None if self.level is None else self.level.verdict

    @property
    def passed(self) -> bool:
        return self.level is not None and self.level.verdict is not Verdict.violates

    def to_dict(self) -> dict[str, Any]:
        lv = self.level
        return {
            "config": self.config, "replicas": self.replicas, "balance": self.balance, "load": self.load,
            "requests": self.requests, "verdict": self.verdict.value if self.verdict else None,
            "passed": self.passed, "error": self.error, "notes": self.notes,
            "slos": [] if lv is None else [
                {"slo": str(j.slo), "values": j.n, "estimate_ms": _num(j.estimate), "low_ms": _num(j.low),
                 "high_ms": _num(j.high), "verdict": j.verdict.value} for j in lv.judgements],
            "records": None if lv is None else [s.records for s in lv.samples],
        }


@dataclass(frozen=True)
class Server:
    url: str
    model: str | None
    api_key: str | None
    tokenizer_dir: Path | None


def check(server: Server, capacity: ConfigCapacity, target: Target, replicas: int, balance: Balance,
          out_dir: Path, progress: Callable[[int, int], None] | None = None) -> CheckResult:
    """Replay one replica's share of `target` against `server` and judge it under the capacity's SLOs."""
    looks = Looks(capacity.alpha, capacity.looks_per_run, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    used: Balance | None
    if target.window is not None:
        scenario, load, level, requests, what = _trace_share(capacity, target, target.window, replicas, balance,
                                                              out_dir)
        used = balance
    else:
        share = target.rps / replicas
        load = "rate" if capacity.load == "rate" else "speedup"
        level = share / capacity.rps_per_unit
        scenario, requests = capacity.scenario, capacity.num_prompts
        what = (f"{share:.4g} req/s ({target.rps:.4g} / {replicas}) of the capacity's scenario "
                f"{capacity.scenario.name}" + (f" (x {level:.3g} its trace)" if load == "speedup" else ""))
        used = None
    result = CheckResult(capacity.label, replicas, used, what, requests, None)
    for slo in capacity.slos:
        needed = requests_to_meet(slo, looks.planned_alpha)
        if needed is not None and needed > requests:
            result.notes.append(f"{requests} requests cannot show {slo} met (a level needs {needed}): "
                                "at best undecided; a longer window or a lower percentile can decide it")
    _, sample = measure_level(server.url, scenario, capacity.slos, load=load, level=level, run=0,
                                num_prompts=requests, looks=looks, out_dir=out_dir, run_id="check",
                                model=server.model, tokenizer_dir=server.tokenizer_dir, api_key=server.api_key,
                                progress=progress)
    if sample.error is not None:
        result.error = sample.error
        return result
    result.level = judge_level(level, [sample], capacity.slos, looks)
    return result


def _trace_share(capacity: ConfigCapacity, target: Target, window: TraceSpec, replicas: int, balance: Balance,
                 out_dir: Path) -> tuple[Scenario, LoadKind, float, int, str]:
    """The busiest replica's share of the window, written as a trace of its own, and the
    scenario that replays it at the target's growth."""
    dealt = shares(load_replay(window), replicas, balance)
    busiest = max(range(replicas), key=lambda k: len(dealt[k].requests))
    path = out_dir / "replica.trace.jsonl"
    write_mooncake(dealt[busiest], path)
    spec = TraceSpec(path=path.resolve(), format="mooncake", block_size=window.block_tokens,
                     cache_block_size=window.cache_block_size, speedup=target.growth)
    scenario = Scenario.model_validate({"name": f"{capacity.scenario.name}-replica",
                                        "endpoint": capacity.scenario.endpoint, "trace": spec})
    sizes = sorted((len(d.requests) for d in dealt), reverse=True)
    what = (f"replica {busiest + 1} of {replicas}: {sizes[0]} of the window's {sum(sizes)} requests "
            f"({balance}; shares {', '.join(map(str, sizes))})"
            + (f", at {target.growth:g}x their recorded times" if target.growth != 1 else ""))
    return scenario, "speedup", target.growth, len(dealt[busiest].requests), what


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None
