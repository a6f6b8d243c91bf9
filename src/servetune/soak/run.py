"""The soak's loop: windows of the scenarios in turn until the duration is spent, the server
watched after each one. A server that dies ends the soak as a recorded outcome (the window it died
in, its log tail and the classify.py verdict), never as an exception; Ctrl-C leaves what was
measured in `SoakRun` for the caller to write."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.classify import Failure, classify_failure, tail
from ..load.scenario import Scenario
from ..vocabulary import ANY_ENGINE_METRIC_NAMES, MetricNames
from .duration import format_duration
from .watch import ServerWatch
from .window import MEASURED, Window, measure_window, window_scenario

MIN_WINDOW_S = 1.0   # a last window shorter than this is not sent: too few requests to say anything
LOG_TAIL_LINES = 60


@dataclass
class Crash:
    window: int                 # the window it died in (or after)
    at_s: float                 # seconds from the soak's start
    reason: str                 # exited / health failing
    outcome: str                # classify.py's outcome
    detail: str
    evidence: list[str]
    log_tail: str

    def line(self) -> str:
        said = "" if not self.detail or self.detail in self.reason else f"; {self.detail}"
        return f"in window {self.window} at {format_duration(self.at_s)}: {self.reason}{said}"


@dataclass
class SoakRun:
    windows: list[Window] = field(default_factory=list)
    crash: Crash | None = None
    interrupted: bool = False
    seconds: float = 0.0
    rss_start_mib: float | None = None     # before the first window


@dataclass(frozen=True)
class SoakPlan:
    scenarios: Sequence[Scenario]
    duration_s: float
    window_s: float


def _diagnose(watch: ServerWatch, diagnose: Callable[[], Failure] | None, log_path: Path | None,
              redact: Callable[[str], str]) -> tuple[Failure, str]:
    """Why it died, and the log's tail (empty when no log is known), secrets masked."""
    text = redact(log_path.read_text(errors="replace")) if log_path is not None and log_path.is_file() else ""
    exit_code = watch.server.exit_code() if watch.server is not None else None
    failure = diagnose() if diagnose is not None else classify_failure(tail(text, 400), exit_code)
    return failure, tail(text, LOG_TAIL_LINES)


def run_soak(watch: ServerWatch, plan: SoakPlan, runs_dir: Path, *, model: str | None = None,
             tokenizer_dir: Path | None = None, metric_names: MetricNames = ANY_ENGINE_METRIC_NAMES,
             log_path: Path | None = None, diagnose: Callable[[], Failure] | None = None,
             redact: Callable[[str], str] = str,
             on_window: Callable[[Window], None] | None = None, result: SoakRun | None = None,
             clock: Callable[[], float] = time.monotonic) -> SoakRun:
    """Windows until `plan.duration_s` is spent or the server dies; `result` (given) fills as it
    goes, so an interrupt leaves every finished window in it. `diagnose` (a booted server: the
    engine's) classifies a death, else the log at `log_path` is classified; `redact` masks the
    launch's secrets out of the log tail kept."""
    run = result if result is not None else SoakRun()
    t0 = clock()
    rss = watch.rss_bytes()
    run.rss_start_mib = None if rss is None else rss / 2**20
    index = 0
    while (left := plan.duration_s - (clock() - t0)) >= MIN_WINDOW_S:
        sc = plan.scenarios[index % len(plan.scenarios)]
        shaped = window_scenario(sc, min(plan.window_s, left), index)
        w = measure_window(watch.url, shaped, index, t0, runs_dir, model=model, tokenizer_dir=tokenizer_dir,
                           api_key=watch.api_key, metric_names=metric_names)
        gone = watch.gone()
        if gone is None:
            rss = watch.rss_bytes()
            w.rss_mib = None if rss is None else rss / 2**20
        run.windows.append(w)
        run.seconds = clock() - t0
        if on_window is not None:
            on_window(w)
        if gone is not None:
            failure, log_tail = _diagnose(watch, diagnose, log_path, redact)
            run.crash = Crash(index, run.seconds, gone, failure.outcome.value, failure.detail, failure.evidence,
                              log_tail)
            return run
        if w.outcome not in [o.value for o in MEASURED] and not w.requests:
            # Alive and healthy, yet nothing measured: say so in the window, keep soaking.
            w.extra["note"] = "no request completed in this window"
        index += 1
    return run


def series(windows: Sequence[Window]) -> dict[str, list[Any]]:
    """The trend test's input: per signal, one value per window (None where not measured)."""
    return {
        "ttft": [w.ttft_ms for w in windows], "tpot": [w.tpot_ms for w in windows],
        "rss": [w.rss_mib for w in windows], "kv_cache_usage": [w.kv_cache_usage for w in windows],
        "preemptions": [w.preemptions for w in windows],
    }
