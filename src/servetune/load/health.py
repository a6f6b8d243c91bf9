"""Client self-check: was the load generator, not the server, the bottleneck of a Run?

A Run is `client_bound` when any of these hold (thresholds chosen well above what this
client shows when idle-to-moderately loaded, and well below effects worth tuning for):
- event-loop lag p99 > 5 ms while a client process is itself busy (> 50 % of a core): chunk
  stamps may be late by that much, and the client is why. The same lag with an idle client
  means the machine is contended (server and client share cores, as with the CPU build on a
  small box): the run is kept, marked `contended`, with a warning saying by how much stamps
  may be late;
- schedule delay p99 > 10 ms: requests left later than their arrival process said
  (measured from the later of the scheduled time and a free concurrency slot);
- open loop without concurrency waits: achieved send rate < 95 % of the requested rate;
- a client process busy > 90 % of one core: it had no headroom left.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

LOOP_LAG_P99_MS = 5.0
SCHEDULE_DELAY_P99_MS = 10.0
MIN_RATE_RATIO = 0.95
MAX_CPU_BUSY = 0.90
LAG_IS_CLIENTS_CPU_BUSY = 0.50


def _stats_ms(values_ns: list[int]) -> dict[str, float]:
    if not values_ns:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    a = np.asarray(values_ns, dtype=np.float64) / 1e6
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def assess(
    *,
    loop_lag_ns: list[int],
    schedule_delay_ns: list[int],
    cpu_busy: list[float],
    requested_rate: float | None,
    sent: int,
    start_ns: int,
    last_dispatch_ns: int | None,
    cap_waits: int,
    workers: int,
) -> dict[str, Any]:
    """The client_health dict of a RunResult; `client_bound` and its `reasons` included."""
    lag, delay = _stats_ms(loop_lag_ns), _stats_ms(schedule_delay_ns)
    achieved = None
    if last_dispatch_ns is not None and last_dispatch_ns > start_ns and sent > 0:
        achieved = sent / ((last_dispatch_ns - start_ns) / 1e9)
    reasons: list[str] = []
    warnings: list[str] = []
    busiest = max(cpu_busy, default=0.0)
    if lag["p99"] > LOOP_LAG_P99_MS:
        if busiest > LAG_IS_CLIENTS_CPU_BUSY:
            reasons.append(f"event-loop lag p99 {lag['p99']:.1f} ms > {LOOP_LAG_P99_MS} ms "
                           f"with the client at {busiest:.0%} of a core")
        else:
            warnings.append(f"machine contended: event-loop lag p99 {lag['p99']:.1f} ms with the client at "
                            f"{busiest:.0%} of a core; latency stamps may be late by up to that much")
    if delay["p99"] > SCHEDULE_DELAY_P99_MS:
        reasons.append(f"schedule delay p99 {delay['p99']:.1f} ms > {SCHEDULE_DELAY_P99_MS} ms")
    if (requested_rate is not None and math.isfinite(requested_rate) and cap_waits == 0
            and achieved is not None and sent > 1 and achieved < MIN_RATE_RATIO * requested_rate):
        reasons.append(f"achieved {achieved:.2f} req/s < {MIN_RATE_RATIO:.0%} of requested {requested_rate:.2f}")
    if busiest > MAX_CPU_BUSY:
        reasons.append(f"client process CPU {busiest:.0%} of a core > {MAX_CPU_BUSY:.0%}")
    return {
        "client_bound": bool(reasons),
        "reasons": reasons,
        "contended": bool(warnings),
        "warnings": warnings,
        "loop_lag_ms": lag,
        "schedule_delay_ms": delay,
        "requested_rate": requested_rate if requested_rate is None or math.isfinite(requested_rate) else "inf",
        "achieved_rate": achieved,
        "cap_waits": cap_waits,
        "cpu_busy": cpu_busy,
        "workers": workers,
        "thresholds": {"loop_lag_p99_ms": LOOP_LAG_P99_MS, "schedule_delay_p99_ms": SCHEDULE_DELAY_P99_MS,
                       "min_rate_ratio": MIN_RATE_RATIO, "max_cpu_busy": MAX_CPU_BUSY,
                       "lag_is_clients_cpu_busy": LAG_IS_CLIENTS_CPU_BUSY},
    }
