"""Output paths checked before any work: a study or a measurement must not be lost to a bad `--out`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import ServetuneError


def writable_dir(path: Path, option: str) -> Path:
    """`path` as a directory servetune can write into, created if missing (parents too)."""
    _ensure_dir(path, f"{option} {path}")
    return path


def not_a_file(path: Path, option: str) -> Path:
    """A directory output named before any work, without creating it yet: a file there is refused."""
    if path.exists() and not path.is_dir():
        raise ServetuneError(f"{option} {path}: exists and is not a directory; name a directory")
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


# What a file name's ending promises its reader. An ending not listed (.txt, none) promises nothing.
FORMAT_OF_SUFFIX = {
    ".json": "JSON", ".jsonl": "JSON lines", ".ndjson": "JSON lines", ".csv": "CSV", ".tsv": "TSV",
    ".yaml": "YAML", ".yml": "YAML", ".md": "Markdown", ".html": "HTML", ".htm": "HTML",
    ".png": "PNG", ".svg": "SVG", ".pdf": "PDF", ".jpg": "JPEG", ".jpeg": "JPEG", ".parquet": "Parquet",
}


def check_format(path: Path, option: str, writes: str) -> None:
    """Refuse a name whose ending promises another format than the one written (JSON lines under
    `.csv` would be read as a broken CSV by the next tool)."""
    promised = FORMAT_OF_SUFFIX.get(path.suffix.lower())
    if promised is not None and promised != writes:
        endings = sorted(s for s, f in FORMAT_OF_SUFFIX.items() if f == writes)
        raise ServetuneError(f"{option} {path}: the name promises {promised}, but this writes {writes}; "
                             f"name it {' or '.join(endings) or 'without that ending'}")


def check_not_input(path: Path, option: str, inputs: Iterable[Path | None]) -> None:
    """Refuse to write over what the command reads, --force or not: the result would replace its
    own source (`trace cut T.csv --out T.csv`)."""
    for source in inputs:
        if source is not None and path.exists() and source.exists() and path.resolve() == source.resolve():
            raise ServetuneError(f"{option} {path}: is the command's own input; name another file")


def output_file(path: Path, option: str, force: bool, writes: str, inputs: Iterable[Path | None] = ()) -> Path:
    """A file output, checked before any work: not one of the command's `inputs` (even with
    `force`), named with an ending that does not promise another format than `writes`, and, as
    `result_file`, no existing file replaced without `force`."""
    check_not_input(path, option, inputs)
    check_format(path, option, writes)
    return result_file(path, option, force)


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
