"""Which reader a trace file needs: named, or detected from its first line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from .csv_formats import read_azure, read_burstgpt
from .jsonl import read_mooncake, read_servetune
from .rows import TraceError, TraceRow

TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt", "servetune"]
READERS: dict[str, Callable[[Path], Iterator[TraceRow]]] = {
    "mooncake": read_mooncake, "azure": read_azure, "burstgpt": read_burstgpt, "servetune": read_servetune}


def detect_format(path: Path) -> str:
    """The format whose fields the first non-blank line holds (a CSV header, a JSON object)."""
    try:
        with path.open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from None
    if not first:
        raise TraceError(f"{path}: the trace is empty")
    if first.lstrip().startswith("{"):
        try:
            keys = set(json.loads(first))
        except (json.JSONDecodeError, TypeError):
            raise TraceError(f"{path}:1: not JSON; name the format with format:") from None
        if {"timestamp", "input_length", "output_length"} <= keys:
            return "mooncake"
        if {"scheduled_ns", "input_len", "output_len"} <= keys:
            return "servetune"
    else:
        header = {h.strip() for h in first.split(",")}
        if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
            return "azure"
        if {"Timestamp", "Request tokens", "Response tokens"} <= header:
            return "burstgpt"
    raise TraceError(f"{path}:1: not a known trace format (mooncake, azure, burstgpt, servetune): {first[:120]!r}")


def read_trace(path: Path, fmt: str = "auto") -> Iterator[TraceRow]:
    """Every row of the trace, streamed, in file order."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in READERS:
        raise TraceError(f"unknown trace format {fmt!r}; known: auto, {', '.join(READERS)}")
    return READERS[fmt](path)
