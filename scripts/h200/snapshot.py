"""Pack a study directory into one archive that is consistent while the tuner is still writing.

    python3 scripts/h200/snapshot.py STUDY_DIR DEST.tar.xz [PRESET]     (or DEST.tar.gz)

xz at PRESET (default 0: about as fast as gzip and a fifth smaller, so the on-device snapshot
every minute stays cheap); repack a fetched store at 6 here before committing it (a third
smaller again): the repo's stores travel in every device call.

The SQLite store (WAL mode) is copied with SQLite's online backup first, then the other files
(per-run JSON/JSONL, server logs), so every file the copied store names is in the archive. The
archive is written beside DEST and renamed over it, so a call killed mid-snapshot still returns
the previous complete one. Archive members are `<dir name>/...`.

With --part-mib N an archive larger than N MiB is cut into DEST.part0, DEST.part1, ... of N MiB
(a device call returns files of at most 16 MiB each); `cat DEST.part*` in order joins them, as
take_back.sh does. A finished capacity study passes 16 MiB even at preset 0.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tarfile
import tempfile
from pathlib import Path

STORE = "study.sqlite"
PART = ".part"


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


def split_parts(dest: Path, part_bytes: int) -> int:
    """Cut DEST into numbered parts when it is larger than part_bytes; returns the number of parts
    (0: DEST left whole). Parts of an earlier, larger snapshot that this one does not overwrite
    are removed, so the parts on disk are always one archive."""
    for stale in dest.parent.glob(dest.name + PART + "*"):
        stale.unlink()
    if dest.stat().st_size <= part_bytes:
        return 0
    count = 0
    with dest.open("rb") as whole:
        while chunk := whole.read(part_bytes):
            partial = dest.with_name(f"{dest.name}{PART}{count}.tmp")
            partial.write_bytes(chunk)
            os.replace(partial, dest.with_name(f"{dest.name}{PART}{count}"))
            count += 1
    dest.unlink()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description="Pack a study directory consistently while its tuner writes.")
    parser.add_argument("study_dir", type=Path)
    parser.add_argument("dest", type=Path, help="DEST.tar.xz or DEST.tar.gz")
    parser.add_argument("preset", type=int, nargs="?", default=0, help="xz preset (default 0)")
    parser.add_argument("--part-mib", type=float, default=None,
                        help="cut an archive larger than this into DEST.part0, DEST.part1, ...")
    args = parser.parse_args()
    if not args.dest.name.endswith((".tar.xz", ".tar.gz")):
        parser.error("DEST must end in .tar.xz or .tar.gz")
    if not args.study_dir.is_dir():
        parser.exit(1, f"snapshot: no directory {args.study_dir}\n")
    size = snapshot(args.study_dir, args.dest, args.preset)
    parts = split_parts(args.dest, int(args.part_mib * 2**20)) if args.part_mib else 0
    where = f" in {parts} parts" if parts else ""
    print(f"st: snapshot {args.dest.name} ({size / 2**20:.1f} MiB{where})")


if __name__ == "__main__":
    main()
