"""How close each config's decode is to the memory-bandwidth roofline: whether tuning has anything left to win.

A decode step cannot be faster than reading, once, every byte it needs: the weights it uses and
the KV cache of the sequences in the batch. The floor TPOT is those bytes over the study's
measured read bandwidth; a config's mean TPOT gives the fraction of the roofline it reaches
(floor / TPOT; 100 % is the physical limit). Counted, all lower bounds:
- weights: the boot log's "Model loading took X GiB" (BootFacts.model_load_gib), as loaded;
  for a mixture of experts only the active share (config.json's num_experts_per_tok of
  num_experts, by parameter count), as at batch 1: larger batches touch more experts;
- KV reads: the scenario's concurrency (1 where it has none) sequences at their mean context
  (prompt + half the answer), 2 (K and V) x the layers that hold KV (a hybrid's attention layers
  only: `models.architecture`) x KV heads x head size x the cache's bytes (the config's
  --kv-cache-dtype: fp8 is one byte; else the model's dtype).
Only decode-bound scenarios are shown: answers of at least half the prompt's length, where
requests spend most of their time in decode steps (a prefill reads the weights once for
hundreds of prompt tokens), and no prefill sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.eta import mean_len
from ..analysis.types import Estimate, StudyAnalysis
from ..load.scenario import Scenario
from ..models.architecture import active_fraction, describe_layers, kv_bytes_per_token
from ..models.source import locate
from ..store import Trial

GIB = 2**30


@dataclass(frozen=True)
class RooflineRow:
    label: str
    scenario: str
    tpot_ms: Estimate               # the config's mean TPOT in the scenario
    floor_ms: float
    weight_gib: float               # weights read per step (the active share for MoE)
    kv_gib: float                   # KV read per step

    @property
    def fraction(self) -> float:
        return roofline_fraction(self.floor_ms, self.tpot_ms.estimate)

    @property
    def fraction_interval(self) -> tuple[float, float]:
        """From the TPOT's interval: a slower TPOT is a smaller fraction."""
        return roofline_fraction(self.floor_ms, self.tpot_ms.high), roofline_fraction(self.floor_ms, self.tpot_ms.low)


@dataclass
class RooflineView:
    read_gbps: float | None
    device: str
    counted: str                    # what the floor counts, one line
    rows: list[RooflineRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def floor_tpot_ms(weight_bytes: float, read_gbps: float, kv_bytes: float = 0.0) -> float:
    """The shortest possible decode step: the bytes it must read over the read bandwidth."""
    return (weight_bytes + kv_bytes) / (read_gbps * 1e9) * 1e3


def roofline_fraction(floor_ms: float, tpot_ms: float) -> float:
    return floor_ms / tpot_ms if tpot_ms > 0 else float("nan")


def decode_bound(scenario: Scenario) -> bool:
    return not scenario.sweep_input_lens and mean_len(scenario.output_len) >= mean_len(scenario.input_len) / 2


def kv_bytes_per_step(scenario: Scenario, per_token: float) -> float:
    context = mean_len(scenario.input_len) + mean_len(scenario.output_len) / 2
    return (scenario.concurrency or 1) * context * per_token


def _model_config(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The model's config.json wherever it is: a directory, or a Hub id's Hugging Face cache (as
    plan reads it; the report never asks the network)."""
    model = (spec.get("engine") or {}).get("model")
    return locate(model, ask_hub=False).config if isinstance(model, str) and model else None


def _weights_gib(trial_ids: list[int], trial_by_id: dict[int, Trial]) -> float | None:
    """The last boot's weight memory (all boots of a config load the same weights)."""
    for tid in reversed(trial_ids):
        facts = trial_by_id[tid].boot_facts if tid in trial_by_id else None
        if facts is not None and facts.model_load_gib:
            return facts.model_load_gib
    return None


def build_roofline(analysis: StudyAnalysis, trial_by_id: dict[int, Trial], spec: dict[str, Any],
                   bandwidth: dict[str, Any] | None) -> RooflineView | None:
    """None when the study did not measure the bandwidth (off, or a store from before)."""
    if bandwidth is None:
        return None
    if "read_gbps" not in bandwidth:
        return RooflineView(None, "", "", notes=[f"memory bandwidth not measured: {bandwidth.get('unavailable')}"])
    read_gbps = float(bandwidth["read_gbps"])
    model = _model_config(spec)
    share, per_token = (active_fraction(model), kv_bytes_per_token(model)) if model else (1.0, 0.0)
    layers = describe_layers(model) if model else None
    counted = (f"weights as loaded{f' x {share:.3f} (active experts)' if share < 1 else ''}"
               f"{' + KV reads of the batch at its mean context' if per_token else ''}"
               f"{f' ({layers})' if layers and per_token else ''}")
    view = RooflineView(read_gbps, str(bandwidth.get("device", "")), counted)
    if model is None:
        view.notes.append("the model's config.json was not readable (neither a directory nor the Hugging Face cache "
                          "holds it): all weights counted, no KV reads")
    scenarios = {s.name: s for s in (Scenario.model_validate(raw) for raw in spec.get("scenarios", []))}
    bound = [name for name, s in scenarios.items() if decode_bound(s)]
    if not bound:
        view.notes.append("no decode-bound scenario (answers at least half the prompt's length)")
    base = analysis.baseline.config if analysis.baseline else None
    for c in analysis.configs:
        weights = _weights_gib(c.trial_ids, trial_by_id)
        if weights is None:
            continue
        label = c.label if c.is_baseline or base is None else c.config.label(base)
        for name in bound:
            result = c.scenarios.get(name)
            tpot = result.metrics.get("mean_tpot_ms") if result else None
            if tpot is None:
                continue
            kv = kv_bytes_per_step(scenarios[name], kv_bytes_per_token(model, c.config.flags.get("kv-cache-dtype"))
                                   if model else 0.0)
            view.rows.append(RooflineRow(label, name, tpot, floor_tpot_ms(weights * share * GIB, read_gbps, kv),
                                         weights * share, kv / GIB))
    beyond = [r for r in view.rows if r.fraction > 1]
    if beyond:
        # No decode beats the bandwidth floor: a share above 100 % means the floor is wrong, not the config.
        view.notes.append(
            f"{len(beyond)} row(s) above 100 % of the roofline ({', '.join(sorted({r.label for r in beyond}))}), "
            "which no decode step can reach: the floor counts bytes a step does not read"
            f"{' (without config.json a mixture of experts is counted with all its experts)' if model is None else ''}"
            " or the bandwidth measured low; these shares say nothing about what is left to win")
    return view
