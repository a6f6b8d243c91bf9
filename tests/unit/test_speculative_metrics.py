"""Acceptance of speculative decoding from vLLM 0.32's /metrics counters, as deltas over a run."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from servetune.load import speculative_metrics as sm
from servetune.load.client import request_body
from servetune.load.scenario import Scenario
from servetune.load.scrape import COUNTERS, Scraper, parse_values
from servetune.vocabulary import VLLM_METRIC_NAMES

# vLLM 0.32's exposition of the spec-decode counters (lines as the CPU server writes them).
TEMPLATE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.79e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
vllm:spec_decode_num_accepted_tokens_per_pos_created{{engine="0",model_name="m",position="0"}} 1.79e+09
"""


def _text(drafts: float, tokens: float, accepted: float, p0: float, p1: float, p2: float) -> str:
    return TEMPLATE.format(drafts=drafts, tokens=tokens, accepted=accepted, p0=p0, p1=p1, p2=p2)


def test_per_position_counters_are_kept_apart() -> None:
    values = parse_values(_text(10, 30, 12, 7, 4, 1), COUNTERS, VLLM_METRIC_NAMES.per_label)
    assert values == {"spec_decode_drafts": 10, "spec_decode_draft_tokens": 30, "spec_decode_accepted_tokens": 12,
                      "spec_decode_accepted_tokens_pos0": 7, "spec_decode_accepted_tokens_pos1": 4,
                      "spec_decode_accepted_tokens_pos2": 1}


def test_acceptance_as_vllm_defines_it() -> None:
    acc = sm.Acceptance.of({"spec_decode_drafts": 20, "spec_decode_draft_tokens": 60, "spec_decode_accepted_tokens": 30,
                            "spec_decode_accepted_tokens_pos0": 15, "spec_decode_accepted_tokens_pos1": 10,
                            "spec_decode_accepted_tokens_pos2": 5})
    assert acc is not None
    assert acc.rate == pytest.approx(0.5)
    assert acc.mean_length == pytest.approx(2.5)        # 1 + 30 / 20
    assert acc.per_position == pytest.approx((0.75, 0.5, 0.25))
    assert sm.Acceptance.of({"spec_decode_drafts": 0, "spec_decode_draft_tokens": 0,
                             "spec_decode_accepted_tokens": 0}) is None
    assert sm.derived({"preemptions": 0}) == {}


def test_a_runs_record_gets_acceptance_from_the_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters that ran before the run (a warmup, an earlier run) do not count."""
    pages = iter([_text(100, 300, 90, 60, 25, 5), _text(120, 360, 120, 75, 35, 10)])

    async def fake_get(self: Scraper) -> bytes | None:
        return next(pages).encode()

    async def scrape() -> dict:
        scraper = Scraper("http://127.0.0.1:1")
        monkeypatch.setattr(Scraper, "_sample_loop", lambda self: asyncio.sleep(0))
        monkeypatch.setattr(Scraper, "_get", fake_get)
        await scraper.before()
        await scraper.after()
        return scraper.result()

    stats = asyncio.run(scrape())
    assert stats["spec_decode_drafts"] == 20 and stats["spec_decode_accepted_tokens"] == 30
    assert stats[sm.RATE] == pytest.approx(30 / 60)
    assert stats[sm.MEAN_LENGTH] == pytest.approx(1 + 30 / 20)
    assert [stats[f"{sm.RATE_AT}{k}"] for k in range(3)] == pytest.approx([15 / 20, 10 / 20, 5 / 20])


def test_a_scenario_can_ask_for_greedy_sampling() -> None:
    """Acceptance depends on sampling; a scenario with `temperature: 0` sends it, one without
    leaves the server's default."""
    greedy = Scenario(temperature=0)
    body = json.loads(request_body("completions", "m", "p", 8, True, greedy.temperature))
    assert body["temperature"] == 0
    assert "temperature" not in json.loads(request_body("completions", "m", "p", 8, True, Scenario().temperature))
    with pytest.raises(ValidationError):
        Scenario(temperature=-1)
