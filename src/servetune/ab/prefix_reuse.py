"""Cold versus warm prefix cache: the TTFT of a long context sent, then sent again verbatim.

Agents re-send their whole context every turn, so the second send's TTFT (prefix cached) is what
they live with. Each pair is one fresh prompt (its own nonce, so nothing else cached it) sent
twice in a row at concurrency 1; the pair's ratio warm/cold is free of the boot's luck, which
both sends share.
"""

from __future__ import annotations

import math
import secrets
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from .. import server_http
from ..load import client
from ..load.bench import pick_tokenizer
from ..load.prompts import PromptFactory
from ..load.records import RequestRecord, RunResult, RunSummary
from ..load.scenario import Scenario
from ..load.scrape import Scraper
from ..vocabulary import Outcome

SCENARIO_NAME = "prefix-reuse"
_API_TIMEOUT = aiohttp.ClientTimeout(total=120)


class PrefixReuse(Scenario):
    """`num_prompts` pairs of an `input_len`-token prompt, sent cold then warm, closed loop at 1."""


def prefix_reuse_scenario(input_len: int, pairs: int, output_len: int = 8) -> PrefixReuse:
    # One warmup with another prompt: the server's first request pays for lazy initialisation.
    return PrefixReuse(name=SCENARIO_NAME, input_len=input_len, output_len=output_len, concurrency=1,
                       num_prompts=pairs, warmups=1)


def measure(url: str, model: str, scenario: PrefixReuse, *, tokenizer_dir: Path | None,
            api_key: str | None) -> RunResult:
    """One Run of pairs; summary: `cold_ttft_ms` and `warm_ttft_ms` (lists, pair by pair), their
    means and `warm_over_cold` (geometric mean of the pairs' ratios)."""
    return client.run(_measure(url, model, scenario, tokenizer_dir, api_key))


async def _measure(url: str, model: str, scenario: PrefixReuse, tokenizer_dir: Path | None,
                   api_key: str | None) -> RunResult:
    assert isinstance(scenario.input_len, int) and isinstance(scenario.output_len, int)
    n = scenario.num_prompts or 1
    async with server_http.session(api_key, _API_TIMEOUT) as session:
        tok, _ = pick_tokenizer(session, url, model, tokenizer_dir)
        factory = PromptFactory(tok, seed=scenario.seed, salt=secrets.randbits(64))
        prompts = [await factory.make(scenario.input_len, with_prefix=False) for _ in range(n + 1)]
    jobs = [client.Job(-1, prompts[0].tokens, scenario.output_len, _body(model, prompts[0].text, scenario), True)]
    for k, prompt in enumerate(prompts[1:]):
        body = _body(model, prompt.text, scenario)  # the very same bytes twice: cold, then warm
        jobs += [client.Job(2 * k, prompt.tokens, scenario.output_len, body),
                 client.Job(2 * k + 1, prompt.tokens, scenario.output_len, body)]
    scraper = Scraper(url, api_key)
    await scraper.before()
    drive = await client.drive(url + client.endpoint_path("completions"), jobs, concurrency=1,
                               start_ns=time.perf_counter_ns(), api_key=api_key,
                               stall_timeout_s=scenario.effective_stall_timeout_s,
                               end_by_ns=time.perf_counter_ns() + int(scenario.effective_run_timeout_s * 1e9))
    await scraper.after()
    result = RunResult(scenario=scenario.name, server_stats=scraper.result())
    result.summary = RunSummary.model_validate(pair_summary([r for r in drive.records if not r.warmup]))
    if drive.timed_out or drive.stalled or result.summary["completed_pairs"] == 0:
        result.outcome = Outcome.stalled if drive.stalled else Outcome.run_timeout if drive.timed_out \
            else Outcome.bad_response
        result.error = f"prefix reuse: {result.summary['completed_pairs']} of {n} pairs completed"
    return result


def pair_summary(records: list[RequestRecord]) -> dict[str, Any]:
    """Pairs (index 2k cold, 2k+1 warm) where both sends got a first token."""
    by_index = {r.index: r for r in records}
    cold, warm = [], []
    for k in range(len(by_index) // 2 + 1):
        c, w = by_index.get(2 * k), by_index.get(2 * k + 1)
        if c is None or w is None or c.error or w.error or c.first_token_ns is None or w.first_token_ns is None:
            continue
        cold.append((c.first_token_ns - c.dispatch_ns) / 1e6)
        warm.append((w.first_token_ns - w.dispatch_ns) / 1e6)
    ratios = [w / c for c, w in zip(cold, warm) if c > 0 and w > 0]
    return {
        "completed_pairs": len(cold),
        "cold_ttft_ms": cold,
        "warm_ttft_ms": warm,
        "mean_cold_ttft_ms": float(np.mean(cold)) if cold else math.nan,
        "mean_warm_ttft_ms": float(np.mean(warm)) if warm else math.nan,
        "warm_over_cold": float(np.exp(np.mean(np.log(ratios)))) if ratios else math.nan,
    }


def _body(model: str, text: str, scenario: PrefixReuse) -> bytes:
    assert isinstance(scenario.output_len, int)
    return client.request_body("completions", model, text, scenario.output_len, scenario.ignore_eos)
