"""Names and directions of the `vllm bench serve` summary metrics a study may optimise or bound."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._hints import did_you_mean

# mean_ttft_ms, median_itl_ms, std_e2el_ms, p99_ttft_ms, p99.9_tpot_ms ...
_LATENCY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
# The objective `maximize: capacity`: the highest load level at which every SLO holds (capacity/).
CAPACITY = "capacity"
# Requests per second that met every per-request SLO (their own TTFT, TPOT, E2EL), vLLM's field name;
# its limits are the scenario's SLOs on those metrics (capacity.slo.per_request_limits).
GOODPUT = "request_goodput"
_HIGHER_IS_BETTER = frozenset(
    {
        CAPACITY,
        "request_throughput",
        GOODPUT,
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "completed",
    }
)
_LOWER_IS_BETTER = frozenset({"duration", "failed"})

# What a did-you-mean suggests from; the latency family is open-ended (any percentile).
_SUGGESTIONS = sorted(
    _HIGHER_IS_BETTER
    | _LOWER_IS_BETTER
    | {f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p90", "p95", "p99")
       for m in ("ttft", "tpot", "itl", "e2el")}
)


def is_known_metric(name: str) -> bool:
    return bool(_LATENCY.match(name)) or name in _HIGHER_IS_BETTER or name in _LOWER_IS_BETTER


def higher_is_better(name: str) -> bool:
    """Throughput-like metrics are better high; latencies (`*_ms`), duration and failures low."""
    return not (name.endswith("_ms") or name in _LOWER_IS_BETTER)


def metric_problem(name: str, also: Iterable[str] = ()) -> str | None:
    """None for a known metric, else what is wrong with a did-you-mean (also among `also`)."""
    if is_known_metric(name):
        return None
    return f"unknown metric {name!r}{did_you_mean(name, [*_SUGGESTIONS, *also])}"


def check_metric(name: str) -> str:
    """The name itself, or ValueError with a did-you-mean."""
    problem = metric_problem(name)
    if problem:
        raise ValueError(problem)
    return name
