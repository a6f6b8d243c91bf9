"""docs/results/field-lessons.md names tests as evidence: every one must exist, and its counts must add up."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "field-lessons.md"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
STATUSES = ("covered", "partly", "not covered")


def _rows() -> list[list[str]]:
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] != "lesson (report, where)" and not cells[0].startswith("---"):
            rows.append(cells)
    return rows


def test_every_test_the_page_names_exists() -> None:
    refs = TEST_REF.findall(PAGE.read_text(encoding="utf-8"))
    assert len(refs) > 40
    missing = [f"{path}::{name}" for path, name in refs
               if not (ROOT / path).is_file()
               or not re.search(rf"^\s*def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M)]
    assert missing == []


def test_every_row_has_a_status_and_a_test_unless_not_covered() -> None:
    for lesson, _where, test, status in _rows():
        kind = next((s for s in reversed(STATUSES) if status.startswith(s)), None)
        assert kind is not None, f"no status: {lesson}"
        assert kind == "not covered" or TEST_REF.search(test), f"no test named: {lesson}"


def test_the_summary_counts_the_rows() -> None:
    counts = dict.fromkeys(STATUSES, 0)
    for *_, status in _rows():
        counts[next(s for s in reversed(STATUSES) if status.startswith(s))] += 1
    summary = re.search(r"(\d+) lessons in the tables: \*\*(\d+) covered, (\d+) partly, (\d+) not covered\*\*",
                        PAGE.read_text(encoding="utf-8"))
    assert summary is not None
    total, covered, partly, not_covered = map(int, summary.groups())
    assert (covered, partly, not_covered) == (counts["covered"], counts["partly"], counts["not covered"])
    assert total == sum(counts.values())
