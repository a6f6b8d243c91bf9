"""The memory probe: is the KV cache pool the right size for the user's load?

Each scenario is run once on a server; its /metrics evidence (preemptions, peak KV usage, the
peaks of running and waiting requests: `report.advice.Evidence`, judged with the same limits as
the report's advice) gives a direction (up, down, stay) and the KV tokens the load needs. The
boot log says how many bytes a KV token costs (the pool's size over its tokens), so the need
becomes the smallest `--kv-cache-memory-bytes` that keeps preemptions at zero at this load, and,
when the device's memory is given, the matching `--gpu-memory-utilization`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..engine.applied import as_number
from ..engine.bootfacts import BootFacts
from ..engine.config import Config, render_value
from ..load.records import SummaryLike
from ..server_evidence import KV_LOW, KV_TIGHT, Evidence

HEADROOM = 0.10  # the smallest setting holds the measured need and this much more
_MIB = 2**20
_GIB = 2**30

Direction = Literal["up", "down", "stay", "unknown"]


class ScenarioNeed(BaseModel):
    """What one scenario's run says about the pool."""

    scenario: str
    preemptions: float | None = None
    kv_usage_peak: float | None = None  # fraction of the pool, 0..1
    running_peak: float | None = None
    waiting_peak: float | None = None
    needed_tokens: int | None = None  # KV tokens the load held (or wanted, when it was preempted)
    basis: str = ""  # how needed_tokens was found


class MemoryVerdict(BaseModel):
    direction: Direction
    text: str  # the one-line verdict
    pool_tokens: int | None = None
    pool_bytes: int | None = None
    bytes_per_token: float | None = None
    needed_tokens: int | None = None  # the most any scenario needs, at least one max-model-len request
    max_model_len: int | None = None
    smallest_kv_cache_bytes: int | None = None  # holds needed_tokens + HEADROOM
    gpu_memory_utilization: float | None = None  # the same pool as a utilization (device memory given)
    scenarios: list[ScenarioNeed] = Field(default_factory=list)


def scenario_need(name: str, server_stats: Mapping[str, Any], summary: SummaryLike,
                  pool_tokens: int | None, max_num_seqs: float | None,
                  clients: int | None = None) -> ScenarioNeed:
    """The KV tokens one run's load needs. Without preemptions: the peak share of the pool it
    used. With preemptions the pool was full, so its peak says only "more": the need is then the
    requests the server held at once (running + waiting, at most max-num-seqs and the scenario's
    `clients`, since the two peaks are sampled apart) times the mean tokens of a request
    (prompt + output), the most each holds at its end."""
    ev = Evidence.of(server_stats)
    need = ScenarioNeed(scenario=name, preemptions=ev.preemptions, kv_usage_peak=ev.kv_usage_peak,
                        running_peak=ev.running_peak, waiting_peak=ev.waiting_peak)
    if (ev.preemptions or 0) == 0 and ev.kv_usage_peak is not None and pool_tokens:
        need.needed_tokens = math.ceil(ev.kv_usage_peak * pool_tokens)
        need.basis = f"peak usage x {pool_tokens:,} tokens"
        return need
    completed = summary.get("completed") or 0
    tokens = (summary.get("total_input_tokens") or 0) + (summary.get("total_output_tokens") or 0)
    held = (ev.running_peak or 0) + (ev.waiting_peak or 0)
    for cap in (max_num_seqs, clients):
        if cap is not None:
            held = min(held, cap)
    if completed and tokens and held:
        per_request = tokens / completed
        need.needed_tokens = math.ceil(held * per_request)
        need.basis = f"preempted: {held:g} requests at once x {per_request:,.0f} tokens (an estimate)"
    return need


def pool_size_bytes(facts: BootFacts, config: Config) -> int | None:
    """The KV pool's bytes: the requested --kv-cache-memory-bytes (exact), else the boot log's
    GiB figure (two decimals: a pool under 5 MiB reads 0.0)."""
    requested = config.flags.get("kv-cache-memory-bytes")
    if isinstance(requested, (int, float, str)) and not isinstance(requested, bool):
        size = as_number(render_value(requested))
        if size:
            return int(size)
    return round(facts.kv_cache_memory_gib * _GIB) if facts.kv_cache_memory_gib else None


def judge(needs: list[ScenarioNeed], facts: BootFacts, config: Config,
          device_memory_gib: float | None = None) -> MemoryVerdict:
    """Up, down or stay for the pool, and the smallest setting that holds every scenario's need."""
    pool_tokens = facts.kv_cache_tokens
    pool_bytes = pool_size_bytes(facts, config)
    per_token = pool_bytes / pool_tokens if pool_bytes and pool_tokens else None
    measured = [n for n in needs if n.preemptions is not None or n.kv_usage_peak is not None]
    verdict = MemoryVerdict(direction="unknown", text="", pool_tokens=pool_tokens, pool_bytes=pool_bytes,
                            bytes_per_token=per_token, max_model_len=facts.max_model_len, scenarios=needs)
    if not measured:
        verdict.text = "no scenario's /metrics said anything about the KV cache: no advice"
        return verdict
    preempted = [n.scenario for n in measured if (n.preemptions or 0) > 0]
    tight = [n.scenario for n in measured if (n.kv_usage_peak or 0) >= KV_TIGHT]
    roomy = all((n.preemptions or 0) == 0 and n.kv_usage_peak is not None and n.kv_usage_peak < KV_LOW
                for n in measured)
    if preempted:
        verdict.direction, why = "up", f"preemptions in {', '.join(preempted)}"
    elif tight:
        verdict.direction, why = "up", f"peak KV usage at or above {KV_TIGHT:.0%} in {', '.join(tight)}"
    elif roomy:
        verdict.direction, why = "down", f"no preemptions and peak KV usage below {KV_LOW:.0%} in every scenario"
    else:
        verdict.direction, why = "stay", "no preemptions and peak KV usage between " \
                                         f"{KV_LOW:.0%} and {KV_TIGHT:.0%}"
    known = [n.needed_tokens for n in measured if n.needed_tokens is not None]
    if known and len(known) == len(measured):
        # vLLM refuses to boot a pool that cannot hold one request of the server's max-model-len
        verdict.needed_tokens = max(*known, facts.max_model_len or 0)
    if verdict.needed_tokens is not None and per_token is not None:
        wanted = verdict.needed_tokens * (1 + HEADROOM) * per_token
        verdict.smallest_kv_cache_bytes = math.ceil(wanted / _MIB) * _MIB
        utilization = as_number(config.flags.get("gpu-memory-utilization"))
        if device_memory_gib and utilization is not None and pool_bytes:
            change = (verdict.smallest_kv_cache_bytes - pool_bytes) / (device_memory_gib * _GIB)
            verdict.gpu_memory_utilization = round(utilization + change, 3)
    verdict.text = _text(verdict, why)
    return verdict


def _text(v: MemoryVerdict, why: str) -> str:
    head = {"up": "raise the KV cache memory", "down": "the KV cache memory can go down",
            "stay": "keep the KV cache memory"}[v.direction]
    line = f"{head}: {why}"
    if v.smallest_kv_cache_bytes is not None:
        line += (f"; the smallest pool that keeps preemptions at zero at this load is --kv-cache-memory-bytes "
                 f"{v.smallest_kv_cache_bytes} ({_size(v.smallest_kv_cache_bytes)}, "
                 f"{v.needed_tokens:,} tokens + {HEADROOM:.0%}"
                 + (", one request of max-model-len" if v.needed_tokens == v.max_model_len else "") + ")")
        if v.pool_bytes:
            line += f" against {_size(v.pool_bytes)} now"
    if v.gpu_memory_utilization is not None:
        line += f"; as a utilization: --gpu-memory-utilization {v.gpu_memory_utilization:g}"
    return line


def _size(n: int) -> str:
    return f"{n / _GIB:.3g} GiB" if n >= _GIB else f"{n / _MIB:.3g} MiB"
