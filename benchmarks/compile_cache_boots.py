"""Boot time per trial, cold against warm compile cache, from studies already recorded.

Run: PYTHONPATH=src python benchmarks/compile_cache_boots.py STUDY_DIR [STUDY_DIR ...] [--json OUT]

Each booted trial of each study: its boot time (healthy_at - started_at), torch.compile's own
time from its boot log ("torch.compile took ... s in total"), and whether vLLM loaded its compiled
graphs from the cache (warm) or compiled (cold): the trial's stored cache record where it has
one, else its log read by `engine.cache.compile_state_from_log`. A boot whose log shows neither
(no torch.compile) is `none`. Then per study and state the count and the median boot and
compile seconds. Nothing is booted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from statistics import median

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servetune.engine.cache import compile_state_from_log  # noqa: E402
from servetune.errors import ServetuneError  # noqa: E402
from servetune.store import StudyStore, Trial  # noqa: E402


def boot_state(trial: Trial, study_dir: Path) -> str:
    if trial.cache is not None and trial.cache.state in ("cold", "warm", "stale"):
        return "cold" if trial.cache.state == "stale" else trial.cache.state
    if trial.log_path:
        path = Path(trial.log_path)
        path = path if path.is_absolute() else study_dir / path
        if not path.is_file():
            path = study_dir / "logs" / path.name   # a store moved with its logs
        if path.is_file():
            return compile_state_from_log(path.read_text(errors="replace")) or "none"
    return "unknown"


def boots(study_dir: Path) -> list[dict[str, object]]:
    store = StudyStore.open_existing(study_dir, read_only=True)
    try:
        out = []
        for t in store.trials():
            if t.healthy_at is None:
                continue
            out.append({"study": study_dir.name, "seq": t.seq, "role": str(t.role), "params": dict(t.params),
                        "state": boot_state(t, study_dir), "boot_s": t.healthy_at - t.started_at,
                        "compile_s": t.boot_facts.torch_compile_seconds if t.boot_facts else None})
        return out
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_dirs", type=Path, nargs="+")
    parser.add_argument("--json", type=Path, default=None, help="write every boot here")
    args = parser.parse_args(argv)
    try:
        rows = [row for d in args.study_dirs for row in boots(d)]
    except (ServetuneError, OSError) as exc:
        if os.environ.get("SERVETUNE_DEBUG"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = Table(title="Boot time per trial by compile-cache state (medians)")
    for column in ("study", "state", "boots", "boot s", "torch.compile s", "trials (seq)"):
        table.add_column(column, justify="left" if column in ("study", "state", "trials (seq)") else "right")
    for study in dict.fromkeys(str(r["study"]) for r in rows):
        for state in ("cold", "warm", "none", "unknown"):
            group = [r for r in rows if r["study"] == study and r["state"] == state]
            if not group:
                continue
            compile_s = [float(c) for r in group if isinstance(c := r["compile_s"], (int, float))]
            table.add_row(study, state, str(len(group)), f"{median(float(r['boot_s']) for r in group):.1f}",  # type: ignore[arg-type]
                          f"{median(compile_s):.1f}" if compile_s else "—",
                          ", ".join(str(r["seq"]) for r in group))
    Console(width=140).print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
