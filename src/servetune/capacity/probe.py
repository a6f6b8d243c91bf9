"""Where a search starts when no `--start` is given: a short saturation probe.

A closed loop of many users for a few seconds keeps the server full; the rate at which its
requests complete is the most it serves (the saturation rate), and no open-loop level above it
can hold any latency SLO. The first level is a fraction of it, so the search brackets the answer
from near it instead of doubling up from 1 req/s through levels that only take time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..load import metrics
from ..load.bench import run_scenario
from ..load.client import Finished
from ..load.options import RunOptions
from ..load.records import RequestRecord
from ..load.scenario import Scenario

PROBE_USERS = 128        # users of the probe's closed loop: more than most servers batch at once
PROBE_SECONDS = 5.0      # how long it keeps them busy, after its first completion
PROBE_MIN_ENDS = 20      # completions it waits for at least (a slow server: longer than PROBE_SECONDS)
# The first level, as a share of what the probe measured. A level over the capacity is lost
# within a few requests and one under it takes a full run, so the start leans high: at 0.7 a
# server whose capacity is half its saturation rate loses the first level in seconds and the
# search steps down (benchmarks/capacity_known_server.py), and one at 0.84 of it (the simulated
# server of benchmarks/capacity_search.py) is met at the first level, with none far under it.
START_FRACTION = 0.7


@dataclass(frozen=True)
class SaturationProbe:
    rate: float              # requests completed per second with the server kept full
    min_latency_s: float     # the fastest request's end-to-end latency (served without waiting)
    users: int
    requests: int            # requests the probe sent
    seconds: float

    def start(self, load: str) -> float:
        """The first level of a search of `load`: START_FRACTION of the saturation rate in req/s;
        for a closed loop, that share of the requests in service at saturation (Little's law over
        the fastest request: about the server's batch slots), at least 1 user."""
        if load == "rate":
            return START_FRACTION * self.rate
        return float(max(1, round(START_FRACTION * self.rate * self.min_latency_s)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def completion_rate(end_s: list[float]) -> float:
    """Completions per second between the first and the last end (the loop's fill-up left out)."""
    ends = sorted(end_s)
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return 0.0
    return (len(ends) - 1) / (ends[-1] - ends[0])


def probe_from_records(records: list[RequestRecord], users: int) -> SaturationProbe | None:
    ok = [r for r in records if metrics.succeeded(r) and r.end_ns]
    if len(ok) < 2:
        return None
    ends = [r.end_ns / 1e9 for r in ok if r.end_ns]
    sent = [r.dispatch_ns for r in records if r.dispatch_ns]
    rate = completion_rate(ends)
    if rate <= 0:
        return None
    return SaturationProbe(rate=rate, min_latency_s=min(metrics.latency_s(r) for r in ok), users=users,
                           requests=len(sent), seconds=max(ends) - min(sent) / 1e9)


def http_probe(url: str, scenario: Scenario, *, out_dir: Path, model: str | None = None,
               tokenizer_dir: Path | None = None, api_key: str | None = None, users: int = PROBE_USERS,
               seconds: float = PROBE_SECONDS) -> SaturationProbe | None:
    """Keep `users` requests of `scenario`'s shape in flight for `seconds` after the first one
    ends (and until PROBE_MIN_ENDS have ended); None when too few completed to say."""
    fields = scenario.model_dump()
    fields.update(concurrency=users, rate=None, num_prompts=max(users * 50, 1000), duration_s=None)
    sc = Scenario.model_validate(fields)
    first_end: list[float] = []

    def should_stop(event: Finished) -> bool:
        now = event.now_ns / 1e9
        if not first_end:
            first_end.append(now)
        return event.finished >= PROBE_MIN_ENDS and now - first_end[0] >= seconds

    result = run_scenario(url, model, sc, RunOptions(tokenizer_dir=tokenizer_dir, out_dir=out_dir, run_id="probe",
                          api_key=api_key, should_stop=should_stop, detailed=False))
    if result.records_path is None:
        return None
    records = [RequestRecord.model_validate_json(line)
               for line in Path(result.records_path).read_text().splitlines() if line.strip()]
    return probe_from_records([r for r in records if not r.warmup], users)
