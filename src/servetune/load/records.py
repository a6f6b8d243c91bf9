"""Per-request records and per-run results, the data every later stage reads."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, overload

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ServetuneError
from ..vocabulary import Outcome


class SummaryLike(Protocol):
    """What code that reads a summary by metric name needs: a RunSummary, or a plain mapping
    (a bench result's JSON, a summary built in place)."""

    @overload
    def get(self, key: str, /) -> Any: ...
    @overload
    def get(self, key: str, default: Any, /) -> Any: ...
    def __getitem__(self, key: str, /) -> Any: ...
    def __contains__(self, key: object, /) -> bool: ...


# A request's error when it was still in flight as the run was stopped early on purpose
# (client.Sender's should_stop): not a failure of the server (metrics.missed_every_slo).
STOPPED_EARLY = "stopped_early"


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
    traffic_class: str | None = None   # a mixed scenario's class or a trace's request type (load/classes.py)

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_ns is not None


def resolve(path: str | Path | None, base_dir: Path | None) -> Path | None:
    """A records path as stored (absolute, or relative to the study/result directory); None if missing."""
    if not path:
        return None
    p = Path(path)
    candidates = [p] if p.is_absolute() else [p, *([base_dir / p] if base_dir else [])]
    return next((c for c in candidates if c.is_file()), None)


def read_records(path: Path) -> list[RequestRecord]:
    """A run's JSONL of RequestRecords; a ServetuneError naming the file and line of a bad one."""
    out: list[RequestRecord] = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(RequestRecord.model_validate_json(line))
            except ValueError as exc:
                raise ServetuneError(f"{path}:{lineno}: not a request record ({exc})") from exc
    return out


class RunSummary(BaseModel):
    """One run's summary under `vllm bench serve`'s JSON field names; servetune's extras (per-token
    ITL, percentiles other than the declared ones, prompt checks, ...) are kept as extra fields.

    It also reads like the dict it replaces (`summary["completed"]`, `.get`, `in`, `.keys()`):
    code that indexes a summary by a metric name chosen at run time (the objective, an SLO) keeps
    working, and a key that was never written is missing, as it was in the dict, not None.
    """

    model_config = ConfigDict(extra="allow")

    duration: float | None = None
    completed: int | None = None
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    median_e2el_ms: float | None = None
    std_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    errors: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields that were written, under their `vllm bench serve` names (what JSON gets)."""
        return self.model_dump(exclude_unset=True)

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.model_fields_set else default

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set

    def keys(self) -> Iterator[str]:
        return iter(self.to_dict())

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.to_dict().items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dict it replaces


class RunResult(BaseModel):
    """One Scenario measured once on one server.

    `summary` uses `vllm bench serve` field names (mean_ttft_ms, p99_itl_ms,
    output_throughput, ...) so existing tools read it; servetune's extras sit beside.
    """

    # A summary assigned as a plain dict is validated into a RunSummary (the store writes its fields).
    model_config = ConfigDict(validate_assignment=True)

    scenario: str
    outcome: Outcome = Outcome.ok
    summary: RunSummary = Field(default_factory=RunSummary)
    server_stats: dict[str, Any] = Field(default_factory=dict)   # /metrics deltas and peaks
    client_health: dict[str, Any] = Field(default_factory=dict)  # loop lag, schedule delay, cpu
    records_path: str | None = None                              # JSONL of RequestRecord
    error: str | None = None
