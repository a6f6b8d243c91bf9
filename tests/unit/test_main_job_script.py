"""scripts/main-job.sh ends by naming the config directory the study really wrote, or none.

The script runs in a copy of the repository layout with a no-op setup and a stand-in `servetune`
that writes what a study with that outcome writes; no engine is involved."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "main-job.sh"

STAND_IN = """#!/usr/bin/env bash
# tune STUDY --out OUT: write what a study with outcome $OUTCOME writes
if [ "$1" = tune ]; then
    out=$4; mkdir -p "$out"; touch "$out/study.sqlite" "$out/report.md" "$out/report.html"
    case "$OUTCOME" in
        winner) mkdir -p "$out/winner" ;;
        baseline) mkdir -p "$out/baseline" ;;
        none) exit 1 ;;
    esac
fi
"""


def _run(tmp_path: Path, outcome: str) -> subprocess.CompletedProcess[str]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "main-job.sh")
    (repo / "scripts" / "setup.sh").write_text("true\n")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "servetune").write_text(STAND_IN)
    (bin_dir / "servetune").chmod(0o755)
    return subprocess.run(["bash", str(repo / "scripts" / "main-job.sh"), "examples/x.yaml", "runs/x"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "OUTCOME": outcome},
                          timeout=60)


@pytest.mark.parametrize(("outcome", "code", "last_line"), [
    ("winner", 0, "winning config: runs/x/winner/"),
    ("baseline", 0, "recommended config (nothing beat the baseline): runs/x/baseline/"),
    ("none", 1, "no recommended config was written (no measured baseline)"),
])
def test_last_line_names_the_directory_really_written(tmp_path: Path, outcome: str, code: int, last_line: str) -> None:
    done = _run(tmp_path, outcome)
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines()[-1].endswith(last_line), done.stdout
    assert "winner/" not in done.stdout or outcome == "winner"
