"""Errors users cause end as one line on stderr and exit code 2: bad study bytes, bad --out, bad
stores, bad option values; user text is printed as text, never as rich markup; no wrapping."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from cli_run import assert_one_line_error, servetune, tree
from report_study import build_study

from servetune.errors import ServetuneError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
# An engine that cannot start: should a check here ever fail to stop the command, no server boots.
TEXT = EXAMPLE.read_text().replace("command: [python, -m, vllm.entrypoints.openai.api_server]",
                                   "command: [servetune-test-no-such-engine]")
assert "servetune-test-no-such-engine" in TEXT


def _study(tmp_path: Path, text: str | bytes, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_non_utf8_study_file_names_file_and_line(tmp_path: Path) -> None:
    study = _study(tmp_path, TEXT.encode().replace(b"name: tiny-cpu", b"name: tiny-\xffcpu"))
    line = assert_one_line_error(servetune("tune", study, "--out", tmp_path / "out"), f"{study}:1:", "not UTF-8")
    assert "0xff" in line
    assert not (tmp_path / "out").exists()


def test_control_character_in_study_file_names_file_and_line(tmp_path: Path) -> None:
    study = _study(tmp_path, TEXT.replace("strategy: ofat", "strategy: of\x00at"))
    assert_one_line_error(servetune("tune", study, "--out", tmp_path / "out"), f"{study}:", "not allowed")


def test_out_that_is_a_file(tmp_path: Path) -> None:
    study = _study(tmp_path, TEXT)
    taken = tmp_path / "taken"
    taken.write_text("mine")
    assert_one_line_error(servetune("tune", study, "--out", taken), "--out", str(taken), "not a directory")
    assert taken.read_text() == "mine"


@pytest.mark.parametrize("out", ["/proc", "/proc/servetune-cannot-exist/study"])
def test_out_that_cannot_be_written(tmp_path: Path, out: str) -> None:
    # /proc refuses new files even to root, for whom permission bits do not count.
    study = _study(tmp_path, TEXT)
    assert_one_line_error(servetune("tune", study, "--out", out), "--out", out)


def _foreign_sqlite(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()


def _truncated_store(path: Path, tmp_path: Path) -> None:
    store, _ = build_study(tmp_path / "source")
    store.close()
    data = (tmp_path / "source" / "study.sqlite").read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2])


BAD_STORES = {
    "random bytes": lambda path, tmp: (path.parent.mkdir(parents=True, exist_ok=True),
                                       path.write_bytes(bytes(range(256)) * 20)),
    "empty file": lambda path, tmp: (path.parent.mkdir(parents=True, exist_ok=True), path.write_bytes(b"")),
    "another program's SQLite": lambda path, tmp: _foreign_sqlite(path),
    "truncated store": _truncated_store,
}


@pytest.mark.parametrize("kind", BAD_STORES)
@pytest.mark.parametrize("command", ["status", "report", "compare"])
def test_bad_store_is_one_line_and_left_unchanged(tmp_path: Path, kind: str, command: str) -> None:
    study_dir = tmp_path / "study"
    path = study_dir / "study.sqlite"
    BAD_STORES[kind](path, tmp_path)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    args = {"status": ["status", study_dir], "report": ["report", study_dir],
            "compare": ["compare", study_dir, study_dir]}[command]
    line = assert_one_line_error(servetune(*args), str(path))
    assert "not a servetune study" in line or "not a usable study store" in line or "damaged" in line
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    # Nothing written beside it either (a reader of a WAL-mode file may leave SQLite's -wal/-shm index).
    assert {p.name for p in study_dir.iterdir()} <= {"study.sqlite", "study.sqlite-wal", "study.sqlite-shm"}


@pytest.mark.parametrize("kind", ["random bytes", "another program's SQLite", "truncated store"])
def test_tune_refuses_a_bad_store(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "study"
    path = out / "study.sqlite"
    BAD_STORES[kind](path, tmp_path)
    before = path.read_bytes()
    assert_one_line_error(servetune("tune", _study(tmp_path, TEXT), "--out", out), str(path))
    assert path.read_bytes() == before


def test_status_on_empty_sqlite_creates_no_tables(tmp_path: Path) -> None:
    path = tmp_path / "study.sqlite"
    path.write_bytes(b"")
    assert_one_line_error(servetune("status", tmp_path), "not a servetune study")
    assert path.read_bytes() == b""


def test_status_and_report_leave_a_real_store_unchanged(tmp_path: Path) -> None:
    store, _ = build_study(tmp_path)
    store.close()
    path = tmp_path / "study.sqlite"
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert servetune("status", tmp_path).code == 0
    assert servetune("report", tmp_path, "--out", tmp_path / "report").code == 0
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_user_text_is_printed_as_text_not_markup(tmp_path: Path) -> None:
    # `[/]` made rich raise MarkupError; `[red]` was swallowed as a style.
    for key in ("[/]", "[red]x"):
        study = _study(tmp_path, TEXT.replace("strategy: ofat", f"'{key}': 1\nstrategy: ofat"))
        line = assert_one_line_error(servetune("tune", study, "--out", tmp_path / "out"))
        assert f"unknown key '{key}'" in line


def test_long_error_is_not_wrapped_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    deep = tmp_path / ("a-long-directory-name-" * 6) / ("another-long-directory-name-" * 4)
    line = assert_one_line_error(servetune("status", deep), "no study store here")
    assert str(deep / "study.sqlite") in line and len(line) > 200


def test_debug_switch_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from servetune.cli import app, boundary

    monkeypatch.setenv("SERVETUNE_DEBUG", "1")
    with pytest.raises(ServetuneError, match="no study store here"):
        boundary.run(app, ["status", str(tmp_path)])


def test_os_and_sqlite_errors_become_one_line_with_the_path() -> None:
    from servetune.cli import boundary

    assert boundary.describe(PermissionError(13, "Permission denied", "/x/report.md")) == \
        "/x/report.md: Permission denied"
    assert boundary.describe(sqlite3.DatabaseError("file is not a database")) == "study store: file is not a database"
    assert boundary.describe(RuntimeError("a bug")) is None  # bugs keep their traceback


def test_bench_unknown_endpoint_lists_the_allowed_values(tmp_path: Path) -> None:
    line = assert_one_line_error(servetune("bench", "--url", "http://127.0.0.1:9", "--scenario", "chat",
                                           "--endpoint", "foo", "--out", tmp_path / "r.json"), "--endpoint")
    assert "'completions'" in line and "'chat'" in line and "pydantic" not in line
    assert tree(tmp_path) == {}


def test_bench_out_is_checked_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured = []
    monkeypatch.setattr("servetune.cli.bench_cmd.run_scenario", lambda *a, **k: measured.append(a))
    for out in (tmp_path, Path("/proc/r.json")):  # a directory; a place nobody can write
        assert_one_line_error(servetune("bench", "--url", "http://127.0.0.1:9", "--scenario", "chat",
                                        "--out", out), "--out", str(out))
    assert measured == []


def test_bench_against_an_unreachable_server_writes_nothing(tmp_path: Path) -> None:
    result = servetune("bench", "--url", "http://127.0.0.1:9", "--scenario", "single-decode",
                       "--out", tmp_path / "out" / "r.json")
    assert result.code == 1
    assert "Traceback" not in result.stderr and "None" not in result.stdout + result.stderr
    (line,) = result.error_lines
    assert "unreachable" in line and "nothing written" in line
    assert tree(tmp_path) == {}


def test_compare_markdown_target_checked_first(tmp_path: Path) -> None:
    assert_one_line_error(servetune("compare", tmp_path, tmp_path, "--markdown", tmp_path), "--markdown")
    assert os.listdir(tmp_path) == []
