"""What became of a trial or a run. Failures are outcomes, never exceptions that end a study."""

from __future__ import annotations

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
