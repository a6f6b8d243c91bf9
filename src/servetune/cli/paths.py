"""Output paths checked before any work: a study or a measurement must not be lost to a bad `--out`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import ServetuneError


def writable_dir(path: Path, option: str) -> Path:
    """`path` as a directory servetune can write into, created if missing (parents too)."""
    if path.exists() and not path.is_dir():
        raise ServetuneError(f"{option} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServetuneError(f"{option} {path}: cannot create the directory: {exc.strerror or exc}") from None
    _probe(path, option)
    return path


def writable_file(path: Path, option: str) -> Path:
    """`path` as a file servetune can (over)write later; only its directory is created now."""
    if path.is_dir():
        raise ServetuneError(f"{option} {path}: is a directory, expected a file name")
    writable_dir(path.parent, option)
    if path.exists() and not os.access(path, os.W_OK):
        raise ServetuneError(f"{option} {path}: the file is not writable")
    return path


def _probe(directory: Path, option: str) -> None:
    """Write and remove a scratch file: permission bits say nothing for root or a read-only mount."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".servetune-probe-"):
            pass
    except OSError as exc:
        raise ServetuneError(f"{option} {directory}: cannot write there: {exc.strerror or exc}") from None
