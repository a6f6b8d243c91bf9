"""Real vLLM server boots of a test run, counted so that the cost of a test is visible.

`install()` (tests/conftest.py calls it on import) puts tests/boot_hook/ first on PYTHONPATH and
names a log file: every Python process the tests start inherits both, and one that is vLLM's
OpenAI server appends a line naming the test that was running (tests/boot_hook/sitecustomize.py).
A session fixture's boot is the test whose set-up started it. The log may be shared by several
pytest runs (scripts/test.sh names one for the whole suite); each run counts its own lines.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections import Counter
from pathlib import Path

LOG_ENV = "SERVETUNE_TEST_BOOT_LOG"
RUN_ENV = "SERVETUNE_TEST_RUN"  # one pytest run: its controller and its xdist workers
HOOK_DIR = Path(__file__).with_name("boot_hook")
_PHASES = (" (setup)", " (call)", " (teardown)")  # PYTEST_CURRENT_TEST's suffixes


def install() -> bool:
    """Set up the log for this process and all it starts; True when this call created the log file
    (the caller then removes it at the end). xdist workers inherit their controller's set-up."""
    created = False
    if not os.environ.get(LOG_ENV):
        fd, name = tempfile.mkstemp(prefix="servetune-boots-", suffix=".jsonl")
        os.close(fd)
        os.environ[LOG_ENV] = name
        created = True
    os.environ.setdefault(RUN_ENV, uuid.uuid4().hex)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(HOOK_DIR) not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), *path])
    return created


def boots_by_test(log: Path, run: str | None = None) -> Counter[str]:
    """Boots per test node id, of one run (or of every run in the log when `run` is None)."""
    counts: Counter[str] = Counter()
    if not log.is_file():
        return counts
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if run is None or entry.get("run") == run:
            test = entry["test"]
            for phase in _PHASES:
                test = test.removesuffix(phase)
            counts[test] += 1
    return counts


def summary(counts: Counter[str]) -> list[str]:
    """The total, then the tests that booted, most boots first."""
    lines = [f"real vLLM server boots: {sum(counts.values())}"]
    lines += [f"{n:5d}  {test}" for test, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return lines
