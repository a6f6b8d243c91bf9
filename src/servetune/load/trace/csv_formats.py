"""CSV formats: Azure's LLM inference traces (2023 and 2024: `TIMESTAMP` wall time,
`ContextTokens`, `GeneratedTokens`) and BurstGPT (`Timestamp` seconds, `Request tokens`,
`Response tokens`, ...). Read a row at a time: the Azure 2024 week-long files hold millions."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from .rows import TraceError, TraceRow, finite_float, positive_int


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """(`file:line`, row) of every data row, after checking the header has `required`."""
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    with f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [k for k in required if k not in header]
        if missing:
            raise TraceError(f"{path}:1: header lacks {', '.join(repr(k) for k in missing)}: "
                             f"{','.join(header)[:80]!r}")
        reader.fieldnames = header
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row or any(row.get(k) is None for k in required):
                raise TraceError(f"{where}: expected {len(header)} columns")
            yield where, row


def _wall_time_s(text: str, where: str) -> float:
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TraceError(f"{where}: 'TIMESTAMP' is not a date and time: {text!r}") from None
    return stamp.timestamp()


def read_azure(path: Path) -> Iterator[TraceRow]:
    for where, row in csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        yield TraceRow(t_s=_wall_time_s(row["TIMESTAMP"], where),
                       input_len=positive_int(row["ContextTokens"], where, "ContextTokens"),
                       output_len=positive_int(row["GeneratedTokens"], where, "GeneratedTokens"))


def read_burstgpt(path: Path) -> Iterator[TraceRow]:
    """A failed request of BurstGPT (0 response tokens) still arrived: it is sent for one token.
    Its `Log Type` (`Conversation log`, `API log`), where the file has it, is the request's class."""
    for where, row in csv_rows(path, ("Timestamp", "Request tokens", "Response tokens")):
        kind = (row.get("Log Type") or "").strip()
        yield TraceRow(t_s=finite_float(row["Timestamp"], where, "Timestamp"),
                       input_len=positive_int(row["Request tokens"], where, "Request tokens"),
                       output_len=max(positive_int(row["Response tokens"], where, "Response tokens", minimum=0), 1),
                       traffic_class=_class_name(kind) if kind else None)


def _class_name(log_type: str) -> str:
    """BurstGPT's `Conversation log` -> `conversation`: a name a study file's SLO can key on."""
    words = log_type.lower().split()
    return "_".join(words[:-1] if len(words) > 1 and words[-1] == "log" else words)
