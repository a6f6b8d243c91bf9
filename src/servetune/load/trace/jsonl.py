"""JSONL formats: Mooncake's traces (FAST'25 release: conversation, tool-and-agent; the arXiv
trace) and servetune's own `<run>.requests.jsonl`, so that a measured run can be replayed
elsewhere. Read a line at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .rows import TraceError, TraceRow, finite_float, positive_int


def json_lines(path: Path, what: str = "trace") -> Iterator[tuple[str, dict[str, Any]]]:
    """(`file:line`, object) of every non-blank line of a JSONL file (a `what`: trace, dataset),
    streamed; a line that is not a JSON object is an error naming its file and line."""
    try:
        f = path.open(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise TraceError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row


def _require(row: dict[str, Any], where: str, *keys: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(repr(k) for k in missing)}")


def read_mooncake(path: Path) -> Iterator[TraceRow]:
    """`timestamp` (ms), `input_length`, `output_length`, `hash_ids` (optional: a prefix block
    each); AIPerf's extensions `session_id` and `delay` (ms of think time before the turn) too."""
    for where, row in json_lines(path):
        _require(row, where, "timestamp", "input_length", "output_length")
        hashes = row.get("hash_ids")
        if hashes is not None and (not isinstance(hashes, list)
                                   or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)):
            raise TraceError(f"{where}: 'hash_ids' must be a list of integers")
        delay = row.get("delay")
        session = row.get("session_id")
        yield TraceRow(
            t_s=finite_float(row["timestamp"], where, "timestamp") / 1000.0,
            input_len=positive_int(row["input_length"], where, "input_length"),
            output_len=positive_int(row["output_length"], where, "output_length"),
            hash_ids=tuple(hashes) if hashes is not None else None,
            session=None if session is None else str(session),
            delay_s=None if delay is None else finite_float(delay, where, "delay") / 1000.0,
        )


def read_servetune(path: Path) -> Iterator[TraceRow]:
    """A run's request records: measured requests only (warmups left out), arriving when the
    run scheduled them, with the lengths the server counted (its usage) where it reported them,
    and a mixed run's class of each."""
    for where, row in json_lines(path):
        _require(row, where, "scheduled_ns", "input_len", "output_len")
        if row.get("warmup"):
            continue
        prompt = row.get("prompt_tokens")
        answer = row.get("output_tokens")
        traffic_class = row.get("traffic_class")
        yield TraceRow(
            t_s=finite_float(row["scheduled_ns"], where, "scheduled_ns") / 1e9,
            input_len=positive_int(prompt if prompt else row["input_len"], where, "input_len"),
            output_len=positive_int(answer if answer else row["output_len"], where, "output_len"),
            traffic_class=None if traffic_class is None else str(traffic_class),
        )
