"""One request of a recorded trace, as every format's reader yields it."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ServetuneError


class TraceError(ServetuneError):
    """A trace that cannot be read: the message names the file and line."""


@dataclass(frozen=True)
class TraceRow:
    """`t_s`: arrival in seconds from any origin (readers keep the file's own); lengths in tokens;
    `hash_ids`: the prompt's prefix blocks (equal ids = the same block, prefix included), None
    when the format has none; `session`/`delay_s`: a multi-turn conversation's id and the think
    time recorded before this turn (sent after the previous turn's answer plus it); `traffic_class`:
    the request's type where the format records one (BurstGPT's `Log Type`, a mixed run's class)."""

    t_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None = None
    session: str | None = None
    delay_s: float | None = None
    traffic_class: str | None = None


def positive_int(value: object, where: str, key: str, *, minimum: int = 1) -> int:
    """`value` as a whole number of at least `minimum` ("12" and 12.0 count), else a one-line error."""
    if isinstance(value, bool):
        raise TraceError(f"{where}: '{key}' must be a whole number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: '{key}' must be a whole number, got {value!r}") from None
    if not number.is_integer() or number < minimum:
        raise TraceError(f"{where}: '{key}' must be a whole number >= {minimum}, got {value!r}")
    return int(number)


def finite_float(value: object, where: str, key: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: '{key}' must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise TraceError(f"{where}: '{key}' must be a finite number, got {value!r}")
    return number
