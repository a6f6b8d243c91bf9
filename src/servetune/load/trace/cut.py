"""A window of a trace written as a trace of its own (Mooncake JSONL, time from 0), for a study
that must fit an hour: the file its scenario then replays whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .window import Replay


def write_mooncake(replay: Replay, path: Path) -> int:
    """Mooncake's fields (`timestamp` ms, lengths, `hash_ids`), plus `session_id` and `delay` for
    the turns of a session (AIPerf's names); the number of requests written."""
    session_of: dict[int, int] = {}
    with path.open("w", encoding="utf-8") as f:
        for i, r in enumerate(replay.requests):
            row: dict[str, Any] = {"timestamp": round(r.offset_s * 1000.0, 3), "input_length": r.input_len,
                                   "output_length": r.output_len}
            if r.hash_ids is not None:
                row["hash_ids"] = list(r.hash_ids)
            if r.follows is not None:
                session_of[i] = session_of.setdefault(r.follows, r.follows)
                row["session_id"] = f"s{session_of[i]}"
                row["delay"] = round(r.delay_s * 1000.0, 3)
            f.write(json.dumps(row) + "\n")
    return len(replay.requests)
