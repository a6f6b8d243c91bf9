"""Trace readers: each format read (and detected) from a real excerpt or a small file of its
columns, streamed, with one-line errors naming the file and line of a bad row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.load.records import RequestRecord
from servetune.load.trace.formats import detect_format, read_trace
from servetune.load.trace.rows import TraceError
from tests.unit.cli_run import assert_one_line_error, servetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake-excerpt.jsonl"
AZURE = FIXTURES / "azure-conv-2023-excerpt.csv"


def test_mooncake_rows_keep_times_lengths_and_prefix_blocks() -> None:
    rows = list(read_trace(MOONCAKE))
    assert len(rows) == 300
    first = json.loads(MOONCAKE.read_text().splitlines()[0])
    assert rows[0].t_s == first["timestamp"] / 1000 and rows[0].input_len == first["input_length"]
    assert rows[0].output_len == first["output_length"] and rows[0].hash_ids == tuple(first["hash_ids"])
    assert rows[-1].t_s == 102.0  # the excerpt's last timestamp, 102000 ms


def test_azure_wall_times_become_seconds_between_rows() -> None:
    rows = list(read_trace(AZURE))
    assert len(rows) == 300 and rows[0].hash_ids is None
    # 18:15:46.6805900 -> 18:15:50.9951690: 4.314579 s apart (100 ns resolution, read to the microsecond)
    assert rows[1].t_s - rows[0].t_s == pytest.approx(4.314579, abs=1e-6)
    assert (rows[0].input_len, rows[0].output_len) == (374, 44)


def test_azure_2024_timestamps_with_a_zone_read_too(tmp_path: Path) -> None:
    path = tmp_path / "azure2024.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,4808,10\n"
                    "2024-05-10 00:00:01.509930+00:00,3180,8\n")
    rows = list(read_trace(path))
    assert rows[1].t_s - rows[0].t_s == pytest.approx(1.5) and rows[1].input_len == 3180


def test_burstgpt_reads_its_columns_and_replays_a_failed_request_for_one_token(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n7.5,GPT-4,1087,0,1087,API log\n")
    assert detect_format(path) == "burstgpt"
    rows = list(read_trace(path))
    assert [(r.t_s, r.input_len, r.output_len) for r in rows] == [(5.0, 472, 18), (7.5, 1087, 1)]


def test_a_runs_request_records_replay_its_measured_requests(tmp_path: Path) -> None:
    path = tmp_path / "run.requests.jsonl"
    records = [RequestRecord(index=-1, warmup=True, input_len=9, output_len=3, scheduled_ns=1),
               RequestRecord(index=0, input_len=100, output_len=20, scheduled_ns=2_000_000_000, prompt_tokens=101,
                             output_tokens=20),
               RequestRecord(index=1, input_len=50, output_len=8, scheduled_ns=2_500_000_000)]
    path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    assert detect_format(path) == "servetune"
    rows = list(read_trace(path))
    assert [(r.t_s, r.input_len, r.output_len) for r in rows] == [(2.0, 101, 20), (2.5, 50, 8)]


def test_sessions_and_think_time_of_aiperfs_mooncake_extension(tmp_path: Path) -> None:
    path = tmp_path / "sessions.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "session_id": "a"}\n'
                    '{"timestamp": 100, "input_length": 20, "output_length": 2, "session_id": "a", "delay": 250}\n')
    rows = list(read_trace(path, "mooncake"))
    assert rows[1].session == "a" and rows[1].delay_s == 0.25


def test_rows_are_streamed_a_bad_later_line_fails_only_when_reached(tmp_path: Path) -> None:
    path = tmp_path / "late-error.jsonl"
    path.write_text(MOONCAKE.read_text().splitlines()[0] + "\n{broken\n")
    rows = read_trace(path)
    assert next(rows).input_len == 6758
    with pytest.raises(TraceError, match=rf"^{path}:2: not JSON"):
        next(rows)


@pytest.mark.parametrize(("text", "needle"), [
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": -3, '
     '"output_length": 1}\n', ":2: 'input_length' must be a whole number >= 1, got -3"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n\n{"timestamp": 1, "input_length": 5}\n',
     ":3: missing 'output_length'"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}\n',
     ":1: 'hash_ids' must be a list of integers"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,many,4\n",
     ":3: 'ContextTokens' must be a whole number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n", ":2: 'TIMESTAMP' is not a date and time"),
    ("when,prompt,answer\n1,2,3\n", ":1: not a known trace format"),
])
def test_a_bad_row_is_one_line_naming_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(text)
    result = servetune("trace", "summary", path)
    assert_one_line_error(result, f"{path}{needle}")
    assert result.code == 2


def test_a_named_format_that_does_not_fit_says_which_columns_are_missing(tmp_path: Path) -> None:
    result = servetune("trace", "summary", MOONCAKE, "--format", "azure")
    assert_one_line_error(result, f"{MOONCAKE}:1: header lacks 'TIMESTAMP', 'ContextTokens', 'GeneratedTokens'")
