"""The load a deployment must serve: a rate, or a trace's busy minute (a percentile of its
per-minute arrival rates), times a growth factor; with a trace, the window a check replays."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ServetuneError
from ..load.trace.formats import read_trace
from ..load.trace.spec import TraceSpec

WINDOW_S = 60.0   # the trace's rates are taken per minute


@dataclass(frozen=True)
class Target:
    rps: float                    # requests per second to serve
    described: str                # what it is, for a reader
    growth: float = 1.0
    window: TraceSpec | None = None   # the busy window (at speed-up 1) a check replays, for a trace target
    percentile: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"req_per_s": self.rps, "described": self.described, "growth": self.growth}
        if self.window is not None:
            out.update(trace=str(self.window.file), percentile=self.percentile, window_start_s=self.window.start_s,
                       window_s=self.window.duration_s)
        return out


def rate_target(rate: float, growth: float) -> Target:
    return Target(rate * growth, f"{rate * growth:.4g} req/s" + (f" ({rate:g} x {growth:g})" if growth != 1 else ""),
                  growth)


def trace_target(trace: TraceSpec, percentile: float, growth: float) -> Target:
    """The minute of `trace` whose arrivals are the `percentile` of its per-minute counts (an
    actual minute: the smallest count at or above that percentile, its first occurrence), as
    a rate times `growth`. Only whole minutes count; a trace shorter than one is one window."""
    where = f"--trace {trace.file}"
    offsets = _offsets(trace, where)
    span = float(offsets[-1]) if len(offsets) else 0.0
    if span < WINDOW_S:
        if span <= 0:
            raise ServetuneError(f"{where}: its requests span no time; no rate to size by")
        start, duration, rate = 0.0, span, len(offsets) / span
        what = f"the whole of {trace.file.name} ({len(offsets)} requests in {span:.0f} s, shorter than a minute)"
    else:
        whole = int(span // WINDOW_S)
        counts = np.bincount((offsets // WINDOW_S).astype(np.int64), minlength=whole + 1)[:whole]
        chosen = float(np.percentile(counts, percentile, method="higher"))
        minute = int(np.flatnonzero(counts == chosen)[0])
        start, duration, rate = minute * WINDOW_S, WINDOW_S, chosen / WINDOW_S
        what = (f"minute {minute} of {trace.file.name}: {chosen:.0f} requests, the p{percentile:g} of its "
                f"{whole} per-minute counts")
    window = trace.model_copy(update={"start_s": start, "duration_s": duration, "speedup": 1.0, "sample": 1.0,
                                      "max_requests": None})
    described = f"{rate * growth:.4g} req/s: {what}" + (f", x {growth:g}" if growth != 1 else "")
    return Target(rate * growth, described, growth, window, percentile)


def _offsets(trace: TraceSpec, where: str) -> np.ndarray:
    """Seconds of every row from the first row's (the origin a window's start_s counts from)."""
    times = [row.t_s for row in read_trace(trace.file, trace.format)]
    if not times:
        raise ServetuneError(f"{where}: the trace has no rows")
    out = np.sort(np.asarray(times, dtype=np.float64) - times[0])
    if not math.isfinite(float(out[-1])):
        raise ServetuneError(f"{where}: its times are not finite")
    return out
