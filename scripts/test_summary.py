"""The end of a suite run (scripts/test.sh): its slowest tests across every pytest run of it and
its real vLLM server boots, so that what a new test costs shows in every CI log.

    python scripts/test_summary.py BOOT_LOG JUNIT.xml [JUNIT.xml ...]

A test's time is its set-up, call and tear-down together (pytest's JUnit report), so a session
fixture's study is charged to the first test that used it.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import boot_log  # noqa: E402

SLOWEST = 25


def test_times(junit_files: list[Path]) -> list[tuple[float, str]]:
    """(seconds, node id) of every test case in the reports that exist (a run that never started has none)."""
    times = []
    for path in junit_files:
        if not path.is_file():
            continue
        for case in ET.parse(path).iter("testcase"):
            module = case.get("classname", "").replace(".", "/")
            times.append((float(case.get("time", 0.0)), f"{module}.py::{case.get('name')}"))
    return times


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: test_summary.py BOOT_LOG JUNIT.xml [JUNIT.xml ...]", file=sys.stderr)
        return 2
    log, junit = Path(argv[0]), [Path(a) for a in argv[1:]]
    times = sorted(test_times(junit), reverse=True)
    print(f"\n== slowest {SLOWEST} tests of the suite ({len(times)} tests, {sum(t for t, _ in times):.0f} s in all) ==")
    for seconds, test in times[:SLOWEST]:
        print(f"{seconds:8.1f} s  {test}")
    print()
    for line in boot_log.summary(boot_log.boots_by_test(log)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
