"""Per-request records and per-run results, the data every later stage reads."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..engine.outcome import Outcome


class RequestRecord(BaseModel):
    """One request as the client saw it. Times are perf_counter_ns of the client process."""

    index: int
    warmup: bool = False
    input_len: int                     # target prompt tokens
    output_len: int                    # requested max_tokens
    scheduled_ns: int                  # when the arrival process wanted it sent
    dispatch_ns: int = 0               # when it was written to the socket
    first_token_ns: int | None = None
    chunk_ns: list[int] = Field(default_factory=list)       # arrival time of every content chunk
    chunk_tokens: list[int] = Field(default_factory=list)   # tokens carried by each chunk
    end_ns: int | None = None
    prompt_tokens: int | None = None   # from the server's usage
    output_tokens: int | None = None   # from the server's usage
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_ns is not None


class RunResult(BaseModel):
    """One Scenario measured once on one server.

    `summary` uses `vllm bench serve` field names (mean_ttft_ms, p99_itl_ms,
    output_throughput, ...) so existing tools read it; servetune's extras sit beside.
    """

    scenario: str
    outcome: Outcome = Outcome.ok
    summary: dict[str, Any] = Field(default_factory=dict)
    server_stats: dict[str, Any] = Field(default_factory=dict)   # /metrics deltas and peaks
    client_health: dict[str, Any] = Field(default_factory=dict)  # loop lag, schedule delay, cpu
    records_path: str | None = None                              # JSONL of RequestRecord
    error: str | None = None
