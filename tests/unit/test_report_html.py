"""report.html opens in headless Chromium (Debian's `chromium`), renders, and logs no errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_study import build_study, chromium_check

from servetune.report import write_report

pytestmark = pytest.mark.slow  # fast tier: ./scripts/test-fast.sh leaves these out


def test_html_renders_in_chromium_without_errors(tmp_path: Path) -> None:
    store, analysis = build_study(tmp_path)
    paths = write_report(analysis, store, tmp_path / "report")
    shot = tmp_path / "report.png"
    dom, stderr = chromium_check(paths["html"], shot, tmp_path)
    assert 'id="headline-text"' in dom and "Winner: max-num-seqs=32" in dom
    assert dom.count("data:image/png;base64,") == 4
    assert "Uncaught" not in stderr and "ERROR:CONSOLE" not in stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
