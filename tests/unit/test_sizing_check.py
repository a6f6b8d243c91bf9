"""`servetune size --check` against the FAKE server of known capacity (`--slots`, tests/fakes/
launch.py): its capacity measured over HTTP by `servetune capacity`, then sized for three times
that capacity and checked with a third of the load on the one server; an undersized check fails.
Slow: a capacity search and three check runs over HTTP."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.launch import fake_server
from tests.fakes.queue_model import QueueModel
from tests.unit.cli_run import servetune

# The queue of tests/unit/test_capacity_http.py (TIME_SCALE 3): saturates at 27 req/s.
MODEL = QueueModel(slots=16, prefill_ms=300.0, itl_ms=60.0, output_len=6)
SLO = "ttft:p90=750"
RUN = 200

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, float]]:
    """The fake's URL, its capacity result (measured over HTTP) and the capacity's point."""
    out = tmp_path_factory.mktemp("cap") / "cap.json"
    with fake_server(ttft_ms=MODEL.prefill_ms, itl_ms=MODEL.itl_ms, slots=MODEL.slots, log=False) as url:
        res = servetune("capacity", "--url", url, "--scenario", "chat", "--slo", SLO, "--input-len", "16",
                        "--output-len", str(MODEL.output_len), "--num-prompts", str(RUN), "--start", "10",
                        "--out", out)
        assert res.code == 0, res.stderr
        yield url, out, float(json.loads(out.read_text())["capacity"]["value"])


def test_three_times_the_capacity_says_three_replicas_and_a_third_of_it_holds_on_one(
        served: tuple[str, Path, float], tmp_path: Path) -> None:
    url, capacity, point = served
    out = tmp_path / "size.json"
    res = servetune("size", capacity, "--rate", repr(3 * point), "--check", "--url", url, "--out", out)
    assert res.code == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    (sized,) = doc["configs"]
    assert sized["replicas"]["value"] == 3
    assert sized["replicas"]["low"] <= 3 <= sized["replicas"]["high"]
    check = doc["check"]
    assert check["replicas"] == 3 and check["passed"] and check["verdict"] in ("meets", "undecided")
    assert check["balance"] is None and "of the capacity's scenario" in check["load"]   # a rate: nothing dealt
    (slo,) = check["slos"]
    assert slo["values"] >= RUN * 0.9 and math.isfinite(slo["estimate_ms"])
    assert all(Path(p).is_file() for p in check["records"])
    assert "check passed" in res.stdout
    more = tmp_path / "more.json"
    assert servetune("size", capacity, "--rate", repr(3.5 * point), "--out", more).code == 0
    assert json.loads(more.read_text())["configs"][0]["replicas"]["value"] == 4


def test_an_undersized_deployment_fails_its_check(served: tuple[str, Path, float], tmp_path: Path) -> None:
    """Two replicas for three capacities' load: one takes 1.5 x its capacity and the SLO breaks."""
    url, capacity, point = served
    out = tmp_path / "size.json"
    res = servetune("size", capacity, "--rate", repr(3 * point), "--check", "--replicas", "2", "--url", url,
                    "--out", out)
    assert res.code == 1 and "check failed" in res.stderr, res.stdout + res.stderr
    check = json.loads(out.read_text())["check"]
    assert check["verdict"] == "violates" and not check["passed"]


def test_a_trace_target_is_dealt_by_session_and_the_busiest_share_replayed(
        served: tuple[str, Path, float], tmp_path: Path) -> None:
    """A trace whose busy minute holds requests of three shared prefixes: the session balancer
    keeps each prefix on one replica (the third to the replica given fewer so far: a tie, the
    first), the result names the balancing, the busiest share is replayed."""
    url, capacity, point = served
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": 60_000 + i * 500, "input_length": 16, "output_length": MODEL.output_len,
             "hash_ids": [i % 3, 1000 + i]} for i in range(120)]   # 120 requests in minute 1
    rows = [{"timestamp": 0, "input_length": 16, "output_length": 4}, *rows,
            {"timestamp": 180_000, "input_length": 16, "output_length": 4}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "size.json"
    growth = 1.5 * point / 2.0   # the busy minute's 2 req/s grown to 1.5 capacities: 2 replicas
    res = servetune("size", capacity, "--trace", trace, "--growth", repr(growth), "--balance", "session",
                    "--check", "--url", url, "--out", out)
    doc = json.loads(out.read_text())
    assert doc["target"]["window_start_s"] == 60 and doc["configs"][0]["replicas"]["value"] == 2
    check = doc["check"]
    assert check["balance"] == "session" and "shares 80, 40" in check["load"], check
    assert check["requests"] == 80 and res.code in (0, 1)
    share = [json.loads(line) for line in (tmp_path / "size.runs" / "replica.trace.jsonl").read_text().splitlines()]
    assert {r["hash_ids"][0] for r in share} == {0, 2}   # prefixes 0 and 2 dealt to replica 1, 1 to replica 2
