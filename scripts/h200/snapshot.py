"""Pack a study directory into one archive that is consistent while the tuner is still writing.

    python3 scripts/h200/snapshot.py STUDY_DIR DEST.tar.xz [PRESET]     (or DEST.tar.gz)

xz at PRESET (default 0: about as fast as gzip and a fifth smaller, so the on-device snapshot
every minute stays cheap); repack a fetched store at 6 here before committing it (a third
smaller again): the repo's stores travel in every device call.

The SQLite store (WAL mode) is copied with SQLite's online backup first, then the other files
(per-run JSON/JSONL, server logs), so every file the copied store names is in the archive. The
archive is written beside DEST and renamed over it, so a call killed mid-snapshot still returns
the previous complete one. Archive members are `<dir name>/...`.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

STORE = "study.sqlite"


def snapshot(study_dir: Path, dest: Path, preset: int = 0) -> int:
    name = study_dir.name
    partial = dest.with_name(dest.name + ".tmp")
    with tempfile.TemporaryDirectory() as tmp:
        store_copy = Path(tmp) / STORE
        if (study_dir / STORE).exists():
            src = sqlite3.connect(f"file:{study_dir / STORE}?mode=ro", uri=True)
            dst = sqlite3.connect(store_copy)
            with dst:
                src.backup(dst)
            src.close()
            dst.close()
        xz = dest.name.endswith(".tar.xz")
        with (tarfile.open(partial, "w:xz", preset=preset) if xz else tarfile.open(partial, "w:gz")) as tar:
            if store_copy.exists():
                tar.add(store_copy, arcname=f"{name}/{STORE}")
            for path in sorted(study_dir.rglob("*")):
                if path.is_file() and not path.name.startswith(STORE):
                    try:
                        tar.add(path, arcname=f"{name}/{path.relative_to(study_dir)}")
                    except FileNotFoundError:  # removed while we walked: not part of the store
                        pass
    os.replace(partial, dest)
    return dest.stat().st_size


def main() -> None:
    if len(sys.argv) not in (3, 4) or not sys.argv[2].endswith((".tar.xz", ".tar.gz")):
        sys.exit("usage: snapshot.py STUDY_DIR DEST.tar.xz|DEST.tar.gz [XZ_PRESET]")
    study_dir, dest = Path(sys.argv[1]), Path(sys.argv[2])
    if not study_dir.is_dir():
        sys.exit(f"snapshot: no directory {study_dir}")
    size = snapshot(study_dir, dest, int(sys.argv[3]) if len(sys.argv) == 4 else 0)
    print(f"st: snapshot {dest.name} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
