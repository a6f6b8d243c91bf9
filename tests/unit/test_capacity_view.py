"""What `servetune capacity` shows per level: the binding SLO's statistic with its interval, the
verdict, the bracket and the capacity as they stood after that level; a line per level where the
output is not a terminal, the same table at the end; an end set by the fitted crossing marked."""

from __future__ import annotations

import io

import numpy as np
from rich.console import Console

from servetune.capacity.document import capacity_document
from servetune.capacity.estimate import FIT, MET, CapacityEstimate
from servetune.capacity.levels import LevelSample, judge_level
from servetune.capacity.search import SearchResult, SearchSettings
from servetune.capacity.sequential import Looks
from servetune.capacity.slo import parse_slos
from servetune.cli.capacity_cmd import capacity_line
from servetune.cli.capacity_view import SearchView, binding, bracket_text

SLOS = parse_slos(["ttft:p90=100", "e2el:p90=1000"])
LOOKS = Looks(0.05, 5, 3)


def _level(level: float, ttft_ms: float) -> LevelSample:
    return LevelSample(level, {"ttft": [np.full(300, ttft_ms)], "e2el": [np.full(300, 200.0)]}, 300, 300)


def test_each_level_is_a_line_with_its_binding_slo_verdict_and_bracket() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    result = SearchResult()
    with SearchView(console, "rate", integer=False) as view:
        for level, ttft in ((4.0, 50.0), (8.0, 300.0)):
            result.levels.append(judge_level(level, [_level(level, ttft)], SLOS, LOOKS))
            view.level_done(result)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("level 4: 300/300 judged, ttft:p90<=100ms 50.0") and "met; bracket [4, ∞]" in lines[0]
    assert lines[1].startswith("level 8: 300/300 judged, ttft:p90<=100ms 300.0") and "violated; bracket [4, 8]" in lines[1]
    table = "\n".join(lines[2:])
    assert "capacity search (req/s)" in table and "binding SLO" in table and "undecided" not in table


def test_the_binding_slo_is_the_violated_one_else_the_nearest_its_limit() -> None:
    near = judge_level(4.0, [_level(4.0, 90.0)], SLOS, LOOKS)
    assert str(binding(near).slo) == "ttft:p90<=100ms"   # 90 of 100 ms against 200 of 1000
    lost = judge_level(4.0, [LevelSample(4.0, {"ttft": [np.full(300, 10.0)], "e2el": [np.full(300, 5000.0)]},
                                         300, 300)], SLOS, LOOKS)
    assert str(binding(lost).slo) == "e2el:p90<=1000ms"


def test_an_end_set_by_the_fitted_crossing_is_marked_in_the_table_the_line_and_the_json() -> None:
    est = CapacityEstimate(11.0, 10.24, 15.8, "ttft:p99<=150ms", low_by=FIT, high_by="violated level")
    assert bracket_text(est) == "[~10.2, 15.8]"
    assert "(low end from the fitted crossing)" in capacity_line(est, "rate", 0.05)
    doc = capacity_document(SearchResult(), est, SLOS, SearchSettings(start=1, min_level=1, max_level=10), "rate", {})
    assert (doc["capacity"]["low_by"], doc["capacity"]["high_by"]) == (FIT, "violated level")
    verdicts = CapacityEstimate(11.0, 10.24, 15.8, None, low_by=MET, high_by="violated level")
    assert bracket_text(verdicts) == "[10.2, 15.8]" and "fitted" not in capacity_line(verdicts, "rate", 0.05)
