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

    @property
    def is_failure(self) -> bool:
        return self is not Outcome.ok
