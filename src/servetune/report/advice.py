"""Server-side evidence per config, and the advice the field reports learnt the hard way.

Evidence comes from the scraped /metrics of each run (`RunResult.server_stats`: counter deltas
and gauge peaks; vLLM's kv_cache_usage_perc is a fraction 0..1), averaged per scenario by the
analysis; advice is given only where the evidence supports it, and every line names the
measurement it rests on (`Advice.basis`). Claims the field reports contradict are not made:
lowering --max-model-len caps one request, not the KV pool (it frees nothing), and a hybrid
model's prefix-cache mode ('align') was measured as a gain in two reports and a cost in one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.applied import AppliedMismatch
from ..engine.bootfacts import BootFacts
from ..engine.config import Config
from ..engine.profile import EngineProfile
from ..engine.registry import profile_for
from ..server_evidence import KV_LOW, Evidence


@dataclass(frozen=True)
class Advice:
    subject: str      # config label or "study"
    topic: str        # short key, e.g. "gpu-memory-utilization"
    text: str
    basis: str        # the measurement the advice rests on, e.g. "/metrics of chat: preemptions 3"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("1", "true", "yes"))


def advise_config(label: str, config: Config, baseline: Config | None,
                  evidence: Mapping[str, Evidence], boot_facts: BootFacts | None,
                  mismatches: Iterable[AppliedMismatch] = (), profile: EngineProfile | None = None) -> list[Advice]:
    """Advice for one config from its per-scenario evidence, BootFacts and applied-check mismatches;
    the flags it names are those of the engine that ran the config (`profile`, vLLM's by default)."""
    pool = (profile or profile_for("vllm")).pool
    out: list[Advice] = []
    ev = {s: e for s, e in evidence.items() if not e.empty}
    tight = sorted(s for s, e in ev.items() if e.pool_tight)
    roomy = sorted(s for s, e in ev.items() if not e.pool_tight and e.preemptions is not None
                   and e.kv_usage_peak is not None and e.kv_usage_peak < KV_LOW)
    diff = config.diff(baseline) if baseline is not None else {}

    if tight:
        worst = max((ev[s] for s in tight), key=lambda e: (e.preemptions or 0, e.kv_usage_peak or 0))
        out.append(Advice(label, pool.share,
                          f"The KV cache pool is tight in {', '.join(tight)}: raising --{pool.share} "
                          f"(or lowering --{pool.batch_limit}) should help; lowering --{pool.context} does not, it "
                          "caps one request, not the pool.",
                          _kv_basis(tight, worst)))
    raised = [f for f in pool.grow if f in diff]
    if raised and ev and not tight:
        scraped = sorted(s for s, e in ev.items() if e.preemptions is not None or e.kv_usage_peak is not None)
        out.append(Advice(label, pool.share,
                          f"This config changes {', '.join('--' + f for f in raised)}, but no scenario preempted "
                          "or filled the KV pool: more KV memory only helps when preemptions > 0 or KV usage is "
                          "high; it takes memory from everything else for no gain.",
                          _kv_basis(scraped or sorted(ev), _fullest(ev[s] for s in (scraped or sorted(ev))))))
    elif roomy and not tight and pool.share in config.flags:
        out.append(Advice(label, pool.share,
                          f"No preemptions and peak KV usage below {KV_LOW:.0%} in {', '.join(roomy)}: the KV "
                          f"pool is larger than this workload needs; do not raise --{pool.share}.",
                          _kv_basis(roomy, _fullest(ev[s] for s in roomy))))

    prefix_on = config.flags.get("enable-prefix-caching")
    rates = {s: e.prefix_hit_rate for s, e in ev.items() if e.prefix_hit_rate is not None}
    if rates and prefix_on is not False and all(r < 0.01 for r in rates.values()):
        # No cost is claimed for a hybrid model's 'align' mode: two field reports measured it as a
        # gain (prefill up to 3.6x, +5 tok/s decode), one suspected a 5-10 % cost it never isolated.
        out.append(Advice(label, "prefix-caching",
                          "The prefix cache hit rate is ~0 in every scenario: prefix caching buys nothing on "
                          "this traffic. On a hybrid (Mamba / linear-attention) model it also sets the mamba "
                          "cache mode, whose effect goes either way: measure --no-enable-prefix-caching "
                          "before turning it off.",
                          "/metrics prefix-cache hit rate " + ", ".join(
                              f"{s} {_pct(r)}" for s, r in sorted(rates.items()))))
    # Waiting > 0 alone is normal (a request waits a scheduler step); it points at the batch limit
    # (max-num-seqs) only when the running batch sat at that limit while the KV pool had room.
    limit = _number(config.flags.get(pool.batch_limit))
    waiting = sorted(s for s, e in ev.items() if (e.waiting_peak or 0) > 0 and not e.pool_tight
                     and limit is not None and (e.running_peak or 0) >= limit)
    if waiting and limit is not None:
        out.append(Advice(label, pool.batch_limit,
                          f"Requests queued (waiting > 0) in {', '.join(waiting)} with the running batch at "
                          f"--{pool.batch_limit} {limit:g} while the KV pool had room: raising it should help.",
                          "/metrics " + "; ".join(
                              f"{s}: peak waiting {_fmt(ev[s].waiting_peak)}, peak running "
                              f"{_fmt(ev[s].running_peak)}, peak KV usage {_pct(ev[s].kv_usage_peak)}"
                              for s in waiting)))

    if boot_facts is not None and boot_facts.gpu_memory_utilization_to_keep_kv is not None:
        out.append(_graph_accounting(label, boot_facts, tight, ev))
    if boot_facts is not None and boot_facts.default_moe_config:
        out.append(Advice(label, "moe-config",
                          "vLLM used its default fused-MoE kernel config (no tuned config for this device). "
                          "Tuning it is a kernel micro-benchmark: check the serving numbers before keeping it.",
                          "boot log: \"Using default MoE config\""))
    if _truthy(config.flags.get("enforce-eager")):
        out.append(Advice(label, "cuda-graphs",
                          "--enforce-eager disables CUDA graphs, which cost decode throughput (33-55 % in two "
                          "field reports); to save graph memory, narrow the capture sizes instead.",
                          "this config's --enforce-eager flag; the cost is the field reports', not this "
                          "study's, unless a config without it was measured beside it"))
    for m in mismatches:
        out.append(Advice(label, "applied-check",
                          f"{describe_mismatch(m)}: the measured effect is not that of the requested value.",
                          f"boot log: {m.evidence_line!r}" if m.evidence_line
                          else "boot log and engine config: no line shows the requested value"))
    return out


def _graph_accounting(label: str, facts: BootFacts, tight: list[str], ev: Mapping[str, Evidence]) -> Advice:
    """vLLM's profiler-estimate line: accounting, not more memory (the GB10 report's lesson 4)."""
    now, keep = facts.gpu_memory_utilization_logged, facts.gpu_memory_utilization_to_keep_kv
    if facts.graph_memory_profiled:
        said = (f"vLLM counts CUDA graph memory against the KV pool: --gpu-memory-utilization {now:g} gives the "
                f"KV cache what {facts.gpu_memory_utilization_without_graphs:g} gave without that accounting")
    else:
        said = (f"CUDA graph memory is not counted (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): "
                f"--gpu-memory-utilization {now:g} may run out of memory once graphs are captured")
    if tight:
        todo = f"the pool is tight in {', '.join(tight)}, so raise it to {keep:g} or more"
    elif ev:
        todo = f"the pool was not tight in any scenario, so {keep:g} (the value vLLM names) would buy nothing"
    else:
        todo = f"raise it to {keep:g} only if preemptions or a high KV usage say the pool is tight"
    basis = f"boot log: {facts.evidence.get('graph_memory_accounting', 'the CUDA graph memory line')!r}"
    if ev:
        fullest = _fullest(ev.values())
        basis += f"; {_kv_basis(sorted(ev), fullest)}"
    return Advice(label, "cuda-graph-memory", f"{said}; {todo}.", basis)


def _fullest(evidence: Iterable[Evidence]) -> Evidence:
    return max(evidence, key=lambda e: (e.preemptions or 0, e.kv_usage_peak or 0))


def _kv_basis(scenarios: list[str], worst: Evidence) -> str:
    return (f"/metrics of {', '.join(scenarios)}: preemptions {_fmt(worst.preemptions)}, "
            f"peak KV usage {_pct(worst.kv_usage_peak)}")


def describe_mismatch(m: AppliedMismatch) -> str:
    """One line for an applied-vs-requested mismatch."""
    applied = "never shown taking effect" if m.applied is None else f"applied {m.applied!r}"
    return f"--{m.flag}: requested {m.requested!r}, {applied} ({m.reason})"


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"
