"""Which Prometheus families on a server's /metrics mean what: each engine names its own
(`Engine.metric_names`); the load generator's scraper and the report read the neutral keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MetricNames:
    """Family name (as prometheus_client's parser reports it, counters without _total) -> the
    engine-neutral key servetune stores (`preemptions`, `kv_cache_usage`, ...)."""

    counters: Mapping[str, str]  # read before and after a run: deltas
    gauges: Mapping[str, str]    # sampled during a run: peaks
    # Counter families kept apart by one label (family -> label): key = the family's key + the label's value.
    per_label: Mapping[str, str] = field(default_factory=dict)
    # Histograms of seconds read like counters, through their `_sum` and `_count` samples only:
    # key_sum, key_count (deltas), from which the run's server-side mean follows.
    histograms: Mapping[str, str] = field(default_factory=dict)


VLLM_METRIC_NAMES = MetricNames(
    counters={
        "vllm:num_preemptions": "preemptions",
        "vllm:prefix_cache_queries": "prefix_cache_queries",
        "vllm:prefix_cache_hits": "prefix_cache_hits",
        "vllm:prompt_tokens": "prompt_tokens",
        "vllm:generation_tokens": "generation_tokens",
        "vllm:spec_decode_num_drafts": "spec_decode_drafts",
        "vllm:spec_decode_num_draft_tokens": "spec_decode_draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "spec_decode_accepted_tokens",
        "vllm:request_success": "requests_succeeded",
        # One sample per draft position (label `position`): a key per position.
        "vllm:spec_decode_num_accepted_tokens_per_pos": "spec_decode_accepted_tokens_pos",
    },
    gauges={
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
    },
    per_label={"vllm:spec_decode_num_accepted_tokens_per_pos": "position"},
    # The engine's own clock, from the API server's arrival of a request (no client, no HTTP):
    # what a client's TTFT and E2EL are checked against (a client's can only be longer).
    histograms={
        "vllm:time_to_first_token_seconds": "server_ttft",
        "vllm:e2e_request_latency_seconds": "server_e2el",
        "vllm:request_queue_time_seconds": "server_queue",
    },
)
