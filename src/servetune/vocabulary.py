"""What measurements and their failures are called, shared by the engine layer and the layers
that measure a server (load/, capacity/, drift/) without either importing the other.

- `Outcome`: what became of a trial or a run. Failures are outcomes, never exceptions that end a study.
- `MetricNames`: which Prometheus families on a server's /metrics mean what. Each engine names its
  own (`Engine.metric_names`); the load generator's scraper and the report read the neutral keys.
  Every engine's together are the default of a client that is not told the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Outcome(StrEnum):
    ok = "ok"
    oom = "oom"
    invalid_arg = "invalid_arg"
    context_too_long = "context_too_long"
    startup_timeout = "startup_timeout"
    crashed = "crashed"
    port_in_use = "port_in_use"
    client_bound = "client_bound"
    # The server stayed up but stopped serving: a stream sent nothing for the stall timeout,
    # or a run passed its deadline (both in the Scenario); the server is stopped either way.
    stalled = "stalled"
    run_timeout = "run_timeout"
    # An API call was refused for want of the right key (401/403), or answered with another
    # error status or a body servetune cannot use.
    unauthorized = "unauthorized"
    bad_response = "bad_response"
    # Not measured, on purpose: the config runs as one already measured (before its boot, from
    # the flags and the engine's defaults; after it, from the boot logs), or it must fail as a
    # config already did. The trial's detail says which and why.
    duplicate = "duplicate"
    skipped = "skipped"

    @property
    def is_failure(self) -> bool:
        return self is not Outcome.ok


def for_http_status(status: int | None) -> Outcome:
    """What a failed API call says about the server: `status` None means no answer came."""
    if status is None:
        return Outcome.crashed
    if status in (401, 403):
        return Outcome.unauthorized
    return Outcome.bad_response


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

    def merged(self, other: MetricNames) -> MetricNames:
        """Both engines' families: one scrape reads whichever server answers (their names differ
        by prefix, `vllm:` or `sglang:`)."""
        return MetricNames(counters={**self.counters, **other.counters}, gauges={**self.gauges, **other.gauges},
                           per_label={**self.per_label, **other.per_label},
                           histograms={**self.histograms, **other.histograms})


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

# SGLang's families (served with --enable-metrics), as its /metrics shows them
# (tests/fixtures/metrics/sglang-*.txt): the same neutral keys as vLLM's where they mean the same.
SGLANG_METRIC_NAMES = MetricNames(
    counters={
        "sglang:prompt_tokens": "prompt_tokens",
        "sglang:generation_tokens": "generation_tokens",
    },
    gauges={
        "sglang:token_usage": "kv_cache_usage",  # the KV pool's used share, 0..1
        "sglang:num_running_reqs": "running",
        "sglang:num_queue_reqs": "waiting",
    },
)
# A server known by its URL alone: whichever engine it runs, its families are among these.
ANY_ENGINE_METRIC_NAMES = VLLM_METRIC_NAMES.merged(SGLANG_METRIC_NAMES)
