"""Output paths checked before any work: a study or a measurement must not be lost to a bad `--out`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import ServetuneError


def writable_dir(path: Path, option: str) -> Path:
    """`path` as a directory servetune can write into, created if missing (parents too)."""
    _ensure_dir(path, f"{option} {path}")
    return path


def writable_file(path: Path, option: str) -> Path:
    """`path` as a file servetune can (over)write later; only its directory is created now."""
    where = f"{option} {path}"
    if path.is_dir():
        raise ServetuneError(f"{where}: is a directory, expected a file name")
    _ensure_dir(path.parent, where)
    if path.exists() and not os.access(path, os.W_OK):
        raise ServetuneError(f"{where}: the file is not writable")
    return path


def _ensure_dir(directory: Path, where: str) -> None:
    if directory.exists() and not directory.is_dir():
        raise ServetuneError(f"{where}: {directory} exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Write and remove a scratch file: permission bits say nothing for root or a read-only mount.
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".servetune-probe-"):
            pass
    except OSError as exc:
        raise ServetuneError(f"{where}: cannot write into {directory}: {exc.strerror or exc}") from None
