"""`should_stop`: the hook that lets a caller end a run early (the capacity search's early stop),
against the FAKE streaming server."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.load.bench import run_scenario
from servetune.load.client import STOPPED_EARLY, Finished
from servetune.load.options import RunOptions
from servetune.load.records import RequestRecord
from servetune.load.scenario import Scenario
from servetune.vocabulary import Outcome
from tests.fakes.launch import fake_server


@pytest.fixture(scope="module")
def fake_url() -> str:
    with fake_server(ttft_ms=5, itl_ms=5) as url:
        yield url


@pytest.mark.parametrize("open_loop", [True, False])
def test_a_run_ends_when_should_stop_says_so(fake_url: str, tmp_path: Path, open_loop: bool) -> None:
    loop = {"concurrency": None, "rate": 100.0} if open_loop else {"concurrency": 4}
    sc = Scenario(name="stop", input_len=10, output_len=8, num_prompts=200, warmups=0, **loop)
    seen: list[Finished] = []

    def stop_after_ten(event: Finished) -> bool:
        seen.append(event)
        return event.finished >= 10

    r = run_scenario(fake_url, None, sc, RunOptions(out_dir=tmp_path, should_stop=stop_after_ten))
    # client_bound: the client's self-check on a busy machine, not the stop's doing
    assert r.outcome in (Outcome.ok, Outcome.client_bound) and r.error is None
    assert r.summary["stopped_early"] is True
    assert len(seen) == 10 and [e.finished for e in seen] == list(range(1, 11))
    assert all(e.record.first_token_ns is not None and e.record.error is None for e in seen)  # parsed copies
    assert all(e.started >= e.finished and e.in_system == e.started - e.finished for e in seen)
    recs = [RequestRecord.model_validate_json(x) for x in Path(r.records_path or "").read_text().splitlines()]
    assert len(recs) < 200 and r.summary["completed"] >= 10
    cut = [x for x in recs if x.error is not None]
    assert all(x.error.startswith(STOPPED_EARLY) for x in cut)
    assert r.summary["completed"] + len(cut) == len(recs)


def test_without_the_hook_nothing_changes(fake_url: str) -> None:
    sc = Scenario(name="full", input_len=10, output_len=4, concurrency=None, rate=200.0, num_prompts=30, warmups=0)
    r = run_scenario(fake_url, None, sc)
    assert r.summary["completed"] == 30 and "stopped_early" not in r.summary


def test_the_hook_needs_the_measured_phase_in_this_process(fake_url: str) -> None:
    sc = Scenario(name="w", input_len=10, output_len=4, concurrency=2, num_prompts=4)
    with pytest.raises(ValueError, match="workers=1"):
        run_scenario(fake_url, None, sc, RunOptions(workers=2, should_stop=lambda e: False))
