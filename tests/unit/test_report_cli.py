"""`servetune report DIR` on a study store: analyze() then write_report()."""

from __future__ import annotations

from pathlib import Path

from report_study import build_study
from typer.testing import CliRunner

from servetune.cli import app


def test_report_command_writes_all_files(tmp_path: Path) -> None:
    store, _ = build_study(tmp_path)
    store.close()
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "out")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Headline" in md and "## Study cost" in md and "58,240" in md
    assert (tmp_path / "out" / "report.html").stat().st_size > 50_000
    assert any((tmp_path / "out" / d / "serve.sh").is_file() for d in ("winner", "baseline"))


def test_report_command_without_store_is_a_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code != 0
    assert "no study store here" in str(result.exception)
