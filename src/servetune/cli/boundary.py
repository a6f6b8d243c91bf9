"""The CLI's edge: every error a user can cause ends as one line on stderr and a documented exit code.

Exit codes: 0 done; 1 the command ran but produced no result (a study whose baseline has no
measurement, a bench run that failed); 2 bad input or an unusable path/store (one line saying
what and where); 130 interrupted. `SERVETUNE_DEBUG=1` re-raises instead, with the traceback.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from typer._click import exceptions as click_errors  # typer vendors click; these are its classes

from ..errors import NoResult, ServetuneError

EXIT_NO_RESULT = 1
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


# What an interrupted command leaves behind, said after "interrupted" (set by the command as it goes).
_kept_on_interrupt: list[str] = []


def on_interrupt(kept: str) -> None:
    """Say `kept` (e.g. "nothing written to res.json") if the command is interrupted from now on."""
    _kept_on_interrupt[:] = [kept]

# soft_wrap: an error is one line even when stderr is a file or pipe (rich would wrap at 80 columns).
err_console = Console(stderr=True, soft_wrap=True, highlight=False, emoji=False)


def debug_enabled() -> bool:
    return os.environ.get("SERVETUNE_DEBUG", "") not in ("", "0")


def print_error(message: str) -> None:
    """`error: MESSAGE`, the message printed as text (never as rich markup: `[/]` is user text here)."""
    lines = [_printable(line) for line in str(message).split("\n") if line.strip()] or ["(no message)"]
    err_console.print("error: ", style="bold red", end="")
    # Several problems (a study file with two bad keys) are one line each, each complete on its own.
    err_console.print("\n".join(lines), markup=False)


def _printable(line: str) -> str:
    # A control character from user text (a key holding \r or \b) must not break or rewrite the line.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def describe(exc: BaseException) -> str | None:
    """One line for the exceptions users cause; None for a bug (which keeps its traceback)."""
    if isinstance(exc, ServetuneError):
        return str(exc)
    if isinstance(exc, click_errors.ClickException):
        return exc.format_message()
    if isinstance(exc, OSError):
        where = ": ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        what = exc.strerror or str(exc)
        return f"{where}: {what}" if where else what
    if isinstance(exc, sqlite3.DatabaseError):
        return f"study store: {exc}"
    return None


def run(command: Callable[..., Any], argv: Sequence[str] | None) -> int:
    """Run the click command without its own error printing; returns the exit code."""
    _kept_on_interrupt.clear()
    try:
        code = command(args=list(argv) if argv is not None else None, prog_name="servetune", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        exc.show()  # `servetune` alone: the help, as click prints it
        return EXIT_USER_ERROR
    except (typer.Abort, KeyboardInterrupt):
        code = EXIT_INTERRUPTED
    except Exception as exc:
        message = describe(exc)
        if message is None or debug_enabled():
            raise
        print_error(message)
        return EXIT_NO_RESULT if isinstance(exc, NoResult) else EXIT_USER_ERROR
    if code == EXIT_INTERRUPTED:  # typer turns a KeyboardInterrupt inside a command into this code, silently
        err_console.print("; ".join(["interrupted", *_kept_on_interrupt]), markup=False)
    return code if isinstance(code, int) else 0


@contextmanager
def store_errors(path: Path) -> Iterator[None]:
    """SQLite errors met while using a store (damage found mid-command) become one line naming it."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise ServetuneError(f"{path}: study store error: {exc}") from exc


def validation_text(exc: ValidationError, names: Mapping[str, str] | None = None) -> str:
    """pydantic's multi-line report as one line: `where: what; ...`, fields renamed through `names`
    (e.g. the CLI option that set them); pydantic's input echo and URLs are left out."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        where = (names or {}).get(loc, loc)
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(dict.fromkeys(parts))
