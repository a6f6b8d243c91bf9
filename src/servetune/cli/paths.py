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


def result_file(path: Path, option: str, force: bool) -> Path:
    """A result file written under exactly this name: not a directory, device or pipe, and not an
    existing file unless `force` (a finished measurement is not replaced by accident)."""
    where = f"{option} {path}"
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ServetuneError(f"{where}: not a regular file (a device or pipe); name a file to write")
    if path.is_file() and not force:
        raise ServetuneError(f"{where}: exists; pass --force to overwrite it, or name another file")
    return writable_file(path, option)


def companion_dir(path: Path, option: str, force: bool) -> Path:
    """A directory written beside a result (OUT.runs/), checked now, created by the first run that lands
    in it: a file in its place, or earlier runs in it without `force`, are refused before any work."""
    if path.exists() and not path.is_dir():
        raise ServetuneError(f"{option}: {path} exists and is not a directory (it would hold the runs); "
                             "move it away or name another --out")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ServetuneError(f"{option}: {path} holds earlier runs; pass --force to write over them, "
                             "or name another --out")
    return path


def runs_dir_of(out: Path) -> Path:
    """OUT.runs/ beside OUT (`.json` dropped: res.json -> res.runs)."""
    return out.with_name(out.name.removesuffix(".json") + ".runs")


def store_kind(directory: Path) -> str | None:
    """What the store in `directory` holds: "ab", "study", or None (no store, or an empty one)."""
    from ..store import StudyStore

    if not (directory / StudyStore.FILENAME).is_file():
        return None
    store = StudyStore.open_existing(directory, read_only=True)
    try:
        if store.get_meta("ab") is not None:  # ab.runner.META_KEY, set by every A/B
            return "ab"
        return "study" if store.spec_doc() is not None or store.trials() else None
    finally:
        store.close()


def check_store_kind(directory: Path, expected: str, option: str) -> None:
    """A tune directory is not resumed as an A/B, nor an A/B as a study: their trials would mix."""
    found = store_kind(directory)
    if found is not None and found != expected:
        names = {"ab": "an A/B (servetune ab)", "study": "a tuning study (servetune tune)"}
        raise ServetuneError(f"{option} {directory}: this directory holds {names[found]}; name another directory")
