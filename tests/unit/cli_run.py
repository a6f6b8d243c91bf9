"""Run the `servetune` entry point in-process, as a user's shell would see it: exit code, stdout, stderr.

`main()` (not the typer app) is what is run, so the CLI's error boundary is part of what is tested.
"""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from servetune.cli import main


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def servetune(*args: str | Path) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["servetune", *(str(a) for a in args)]  # what the console script sees
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            else:
                code = 0
    finally:
        sys.argv = argv
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_one_line_error(result: Outcome, *needles: str) -> str:
    """Exit code 2, exactly one line on stderr, no traceback, each needle in that line."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.error_lines) == 1, result.stderr
    (line,) = result.error_lines
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes, to show that nothing was written."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
