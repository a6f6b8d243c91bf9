"""Request records as a run's JSONL stores them, with the TTFT a test wants (4 tokens, 20 ms apart)."""

from __future__ import annotations

from pathlib import Path

from servetune.load.records import RequestRecord


def request_record_json(index: int, ttft_ms: float) -> str:
    t0 = index * 10**9
    first = t0 + int(ttft_ms * 1e6)
    chunks = [first + k * 20_000_000 for k in range(4)]
    return RequestRecord(index=index, warmup=False, input_len=8, output_len=4, scheduled_ns=t0, dispatch_ns=t0,
                         first_token_ns=first, chunk_ns=chunks, chunk_tokens=[1] * 4, end_ns=chunks[-1],
                         prompt_tokens=8, output_tokens=4).model_dump_json()


def closed_loop_records(path: Path, users: int, wave_ttft_ms: float, steady_ttft_ms: float) -> Path:
    """A closed loop's level: its first wave of `users` requests slow, the 2 x users after it not."""
    path.write_text("\n".join(request_record_json(i, wave_ttft_ms if i < users else steady_ttft_ms)
                              for i in range(3 * users)) + "\n")
    return path
