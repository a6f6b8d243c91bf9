"""A first study file drafted from what a user has (`servetune init`): a model, optionally the
`vllm serve` line they run today (the baseline), a workload, SLOs and the hardware found here.

Every choice is written with a one-line `# why`, so the file teaches what it does; the text is
parsed back with the study loader before it is written, so it always loads. The search space is
the flags the field's tuning reports move first, cut to what this hardware runs: on a GPU the
chunked-prefill budget, max-num-seqs, async scheduling, the CUDA graph mode, the memory share and
prefix caching, an fp8 KV cache, tensor parallel across several GPUs, without the values the GPUs
found cannot run as meant (engine/gates.py: an fp8 KV cache before compute capability 8.9), each named
in a `# left out:` line; on the CPU build the batch sizes and prefix caching; for a hybrid model
(Mamba / linear-attention layers in its config.json) the mamba cache mode. A value equal to the engine's default is a
duplicate the study does not boot, so booleans list both values and the default's costs nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..capacity.slo import Slo, requests_to_meet
from ..engine import speculative
from ..engine.gates import why_not_here
from ..engine.hardware import Hardware
from ..engine.registry import profile_for
from ..errors import ServetuneError
from ..load.scenario import PRESETS
from ..models.architecture import describe_layers
from ..models.source import ModelSource
from .serve_line import ServeLine
from .workload import Workload

Goal = Literal["throughput", "capacity"]
_PLAIN = re.compile(r"^-?[A-Za-z_][\w./\-]*$")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
_CPU_MAX_INPUT, _CPU_MAX_OUTPUT, _CPU_MAX_PROMPTS = 512, 128, 16
_FIT_SHARE = 0.7  # weights may take this share of a GPU's memory and leave room for the KV cache
_COMMENT_COLUMN = 44


@dataclass
class DraftInput:
    name: str
    model: ModelSource
    hardware: Hardware
    serve: ServeLine | None = None
    presets: list[str] = field(default_factory=list)
    workload: Workload | None = None
    workload_path: Path | None = None
    slos: list[Slo] = field(default_factory=list)
    goal: Goal = "throughput"
    alpha: float = 0.05
    engine: str = "vllm"  # the engine kind the study tunes (engine/registry.py)


@dataclass
class _Lines:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str, why: str = "") -> None:
        if why:
            text = f"{text.ljust(_COMMENT_COLUMN - 2)}  # {why}"
        self.lines.append(text)

    def comment(self, text: str, indent: str = "") -> None:
        self.lines.append(f"{indent}# {text}")


def flow(value: Any) -> str:
    """A value as YAML flow text (JSON where a plain scalar would be read back as something else)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flow(str(k))}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def draft(inp: DraftInput) -> tuple[str, dict[str, Any]]:
    """The study file's text (header left to the caller) and the facts the header tells."""
    hw, model = inp.hardware, inp.model
    serve = inp.serve
    profile = profile_for(inp.engine)
    out = _Lines()
    baseline = dict(serve.args) if serve else {}
    why_base = (f"your current `{' '.join(profile.deployment.launch)}` flags: the baseline every candidate is "
                "judged against" if serve
                else f"{profile.label}'s defaults are the baseline: does any flag beat them on this workload?")
    if not model.has_weights:
        baseline.setdefault("load-format", "dummy")
    tp_values, gpus_per_trial, slots = _parallel(inp, baseline)
    if profile.init_space:
        tp_values = []  # the engine's own space: its tensor-parallel flag is its own
    if not hw.is_gpu and not profile.init_space:
        baseline.setdefault("kv-cache-memory-bytes", "2GiB")
        baseline.setdefault("max-model-len", _context_needed(inp))

    out.add(f"name: {flow(inp.name)}")
    out.add("engine:")
    out.add(f"  kind: {profile.kind}")
    command = serve.command if serve else list(profile.default_command)
    out.add(f"  command: {flow(command)}", "from your serve line" if serve else
            f"`python`: the interpreter servetune runs in, with {profile.label} installed beside it")
    if serve and serve.dropped:
        out.comment(f"left out of your line: {', '.join(serve.dropped)}", "  ")
    out.add(f"  model: {flow(model.name)}", model.where)
    out.add(f"  args: {flow(baseline)}", why_base)
    if not model.has_weights:
        out.comment(f"load-format dummy: the directory has no weight files, so {profile.label} runs random weights "
                    "(speed is the real model's, answers are not)", "  ")
    if "kv-cache-memory-bytes" in baseline and not hw.is_gpu:
        out.comment("kv-cache-memory-bytes and max-model-len: the CPU build sizes its KV cache from these, "
                    "not from a share of GPU memory", "  ")
    if serve and serve.env:
        out.add(f"  env: {flow(serve.env)}", "the variables your serve line sets")
    secrets = list(serve.secret_env) if serve else []
    if secrets:
        out.add(f"  secret_env: {flow(secrets)}", "read from your environment at launch, never stored")
    if serve and serve.port:
        out.add(f"  port: {serve.port}", "your serve line's port (slot i uses port + i)")
    if serve and serve.served_model_name:
        out.add(f"  served_model_name: {flow(serve.served_model_name)}")
    out.add("  startup_timeout_s: 3600", "the cap of a boot whose log keeps moving: "
            + ("the first boot downloads the weights, " if model.directory is None else "")
            + "a cold first boot (compiling, autotuning, capturing) takes many minutes")
    out.add("  startup_stall_s: 600", "a boot whose log stays silent this long has failed (its phase is named)")

    out.add("space:", "one value at a time from the baseline (ofat); the order is the search's order")
    wanted = ([(k, list(v), why) for k, v, why in profile.init_space] if profile.init_space
              else _space(inp, baseline, tp_values))
    space, left_out = runnable(wanted, hw)
    for key, values, why in space:
        out.add(f"  {key}: {flow(values)}", why)
    for line in left_out:
        out.comment(f"left out: {line}", "  ")
    if any(key.startswith(speculative.FLAG) for key, _, _ in space):
        out.comment("speculative decoding's speed is its acceptance, which depends on the text: these "
                    "scenarios' prompts are random tokens, so add one whose `dataset:` is a JSONL of your own "
                    "prompts ({\"prompt\": ...} a line); `servetune plan` warns until every scenario has one", "  ")

    scenarios, slo_scenarios = _scenarios(inp)
    out.add("scenarios:")
    for text, why, notes in scenarios:
        out.add(f"  - {text}", why)
        for note in notes:
            out.comment(note, "    ")

    out.add("objective:")
    slo = {s.key: s.limit_ms for s in inp.slos}
    if inp.goal == "capacity":
        out.add("  maximize: capacity", "the highest load at which every SLO holds, per scenario")
    else:
        out.add("  maximize: output_throughput", "output tokens/s, as `vllm bench serve` counts them")
    if slo:
        out.add(f"  slo: {flow(slo)}", "every scenario must meet these: a faster config that breaks one loses")
    if len(slo_scenarios) > 1:
        out.add("  combine: weighted", "the geometric mean of the scenarios' gains over the baseline")
    if len(tp_values) > 1:
        out.add("  per_gpu: true", "tensor parallel N must serve more than N times one GPU to win")
    if inp.goal == "capacity":
        out.add(f"capacity: {flow({'num_prompts': _capacity_prompts(inp)})}",
                "requests a load level: enough to show each percentile SLO met")
    shared = _memory_shared(hw)
    if shared:
        out.comment(f"gpu-memory-utilization is not raised: {shared}; `servetune probe utilization` finds the "
                    "highest value that boots beside it")
        out.add("prefer_less_memory: true", "of winners the study cannot tell apart, the one that reserves the "
                "least memory")
    out.add("strategy: ofat", "one factor at a time: a boot per value, and a value that wins is kept")
    replicates = _replicates(inp)
    out.add(f"replicates: {replicates}", "a GPU's runs on one boot vary by ~2 %; a CPU's by 15-25 %, so more"
            if hw.is_gpu else "runs on one CPU boot vary by 15-25 %: three to see it")
    out.add("finalists: 1", "the best candidate is booted again beside a fresh baseline: a winner needs two "
            "boots a side")
    if slots > 1 or gpus_per_trial:
        out.add(f"parallel: {flow({'slots': slots, 'gpus_per_trial': gpus_per_trial})}",
                f"{slots} trial(s) at once, {gpus_per_trial} GPU(s) each, on this host's {len(hw.gpus)}")
    facts = {"gpus": len(hw.gpus), "tp": tp_values, "slots": slots}
    return "\n".join(out.lines) + "\n", facts


def _parallel(inp: DraftInput, baseline: dict[str, Any]) -> tuple[list[int], int, int]:
    """(tensor parallel sizes to compare, GPUs a trial takes, slots). One GPU or the CPU: ([], 0|1, 1)."""
    hw = inp.hardware
    if not hw.is_gpu:
        return [], 0, 1
    gib = inp.model.weights_gib or 0.0
    need = 1
    while need < len(hw.gpus) and gib > _FIT_SHARE * hw.gpu_memory_gib * need:
        need *= 2
    given = baseline.get("tensor-parallel-size")
    if isinstance(given, int) and given > 0:
        need = given
    elif need > 1:
        baseline["tensor-parallel-size"] = need
    if need > len(hw.gpus):
        raise ServetuneError(f"the model ({gib:.0f} GiB) needs tensor parallel {need}, and this host has "
                             f"{len(hw.gpus)} GPU(s)")
    tp = [need, need * 2] if need * 2 <= min(len(hw.gpus), 8) else [need]
    per_trial = max(tp)
    return tp, per_trial, max(len(hw.gpus) // per_trial, 1)


def _space(inp: DraftInput, baseline: dict[str, Any], tp: list[int]) -> list[tuple[str, list[Any], str]]:
    hw = inp.hardware
    space: list[tuple[str, list[Any], str]] = []
    if len(tp) > 1:
        space.append(("tensor-parallel-size", tp, "a second GPU per server: worth it only if it more than "
                      "doubles what one serves (per_gpu)"))
    layers = describe_layers(inp.model.config) if inp.model.config else None
    if layers and "mamba-cache-mode" not in baseline:
        # Field reports measured 'align' both ways (+5 tok/s; up to 3.6x prefill with prefix
        # caching; a suspected 5-10 % cost): a candidate to measure, not a default to trust.
        space.append(("mamba-cache-mode", ["align", "none"], f"a hybrid model, {layers}: how that state is "
                      "cached for prefix caching; vLLM may override it (the applied check says)"))
    if not hw.is_gpu:
        space += [
            ("max-num-seqs", [8, 32], "sequences batched at once: more is more throughput until the cores saturate"),
            ("max-num-batched-tokens", [1024, 4096], "tokens a step: prefill chunks against decode latency"),
            ("enable-prefix-caching", [True, False], "the default's value is a duplicate, not booted; off skips "
             "the block hashing when prompts share nothing"),
        ]
        return space
    space += [
        ("max-num-batched-tokens", [2048, 16384], "the chunked-prefill budget (default 8192 on large GPUs): "
         "smaller chunks keep streams smooth, larger ones finish prompts sooner"),
        ("max-num-seqs", [128, 512], "sequences batched at once (default 256-1024 by GPU): fewer for latency, "
         "more for throughput when the KV cache holds them"),
        ("async-scheduling", [True, False], "schedules the next step while the GPU runs this one; "
         "the default's value is a duplicate, not booted"),
    ]
    compilation = baseline.get("compilation-config")
    if isinstance(compilation, dict):
        space.append(("compilation-config.cudagraph_mode", ["PIECEWISE", "FULL_AND_PIECEWISE"],
                      "which parts of a step run as CUDA graphs"))
    else:
        space.append(("compilation-config", [{"cudagraph_mode": "PIECEWISE"}],
                      "CUDA graphs around attention only (the default captures full graphs too)"))
    if not _memory_shared(hw):
        space.append(("gpu-memory-utilization", [0.95], "a larger KV cache than the default 0.9 leaves (nothing "
                      "else uses the GPU now)"))
    space += [
        ("enable-prefix-caching", [True, False], "on by default in vLLM's V1 engine (a duplicate, not booted); "
         "off skips hashing when prompts share nothing"),
    ]
    space += _speculative(inp, baseline)
    if "kv-cache-dtype" not in baseline:
        space.append(("kv-cache-dtype", ["fp8"], "an fp8 KV cache: twice the tokens fit (check the answers with "
                      "your evals)"))
    return space


def _memory_shared(hw: Hardware) -> str:
    """Why the GPU's memory is not the server's alone ('' when it is): unified with the host's, or
    in use by other processes now."""
    if hw.unified_memory:
        names = sorted({g.name for g in hw.gpus if g.unified_memory})
        return f"{', '.join(names)} shares its memory with the host (unified memory), and the OS needs its part"
    if hw.shared:
        used = max(g.used_gib or 0.0 for g in hw.gpus)
        return f"{used:.1f} GiB of a GPU are in use by other processes"
    return ""


def _speculative(inp: DraftInput, baseline: dict[str, Any]) -> list[tuple[str, list[Any], str]]:
    """A model with MTP layers in its config.json: vLLM's MTP method, swept over n."""
    layers = speculative.mtp_layers(inp.model.config)
    if not layers:
        return []
    why = (f"config.json declares {layers} MTP layer(s): multi-token prediction proposes tokens checked in one "
           "step; the best n moves with the workload (the field: 3 on short prompts, 6 on long ones)")
    current = baseline.get(speculative.FLAG)
    if isinstance(current, dict):
        values = [n for n in speculative.MTP_SWEEP if n != current.get(speculative.TOKENS_FIELD)]
        return [(speculative.TOKENS_PARAM, values, why)]
    if current is not None:
        return []
    return [(speculative.FLAG, [{"method": "mtp", speculative.TOKENS_FIELD: n} for n in speculative.MTP_SWEEP],
             why)]


def runnable(space: list[tuple[str, list[Any], str]], hw: Hardware) -> tuple[list[tuple[str, list[Any], str]],
                                                                          list[str]]:
    """The space without the values this hardware cannot run as meant (engine/gates.py), and why
    each left out was."""
    kept: list[tuple[str, list[Any], str]] = []
    left_out: list[str] = []
    for name, values, why in space:
        allowed = []
        for value in values:
            reason = why_not_here(name, value, hw)
            if reason is None:
                allowed.append(value)
            else:
                left_out.append(f"{name} {value}: {reason}")
        if allowed:
            kept.append((name, allowed, why))
    return kept, left_out


def _scenarios(inp: DraftInput) -> tuple[list[tuple[str, str, list[str]]], list[str]]:
    """(scenario entries as flow text with their why and notes, scenario names)."""
    gpu = inp.hardware.is_gpu
    entries: list[tuple[str, str, list[str]]] = []
    names: list[str] = []
    for name in inp.presets:
        if name not in PRESETS:
            raise ServetuneError(f"--workload {name!r}: not a preset or a file; presets: {', '.join(PRESETS)}")
        preset = PRESETS[name]
        if inp.goal == "capacity" and (preset.sweep_input_lens or preset.duration_s):
            raise ServetuneError(f"--workload {name}: a capacity search cannot use a prompt-size sweep")
        fields: dict[str, Any] = {"preset": name}
        why = _preset_why(name)
        if not gpu:
            fields.update(_shrunk_for_cpu(preset.input_len, preset.output_len, preset.num_prompts))
            why = "shortened: the CPU build decodes ~100x slower than a GPU"
        prompts = fields.get("num_prompts", preset.num_prompts)
        notes = []
        if prompts is not None and not preset.duration_s and prompts < _slo_prompts(inp):
            fields["num_prompts"] = _slo_prompts(inp)
            notes.append(_slo_prompts_note(inp))
        entries.append((flow(fields), why, notes))
        names.append(name)
    if inp.workload is not None:
        w = inp.workload
        prompts = max(200 if gpu else _CPU_MAX_PROMPTS, _slo_prompts(inp))
        fields = {"name": "my-traffic", "input_len": w.input.as_yaml(), "output_len": w.output.as_yaml(),
                  "concurrency": 16 if gpu else 4, "num_prompts": prompts}
        entries.append((flow(fields), f"from {inp.workload_path} ({w.requests} requests)", [
            f"input tokens: {w.input.describe()} (counted by {w.counted_by})",
            f"output tokens: {w.output.describe()}; `dataset: {inp.workload_path}` replays the prompts themselves",
            *([_slo_prompts_note(inp)] if prompts > (200 if gpu else _CPU_MAX_PROMPTS) else [])]))
        names.append("my-traffic")
    if not names:
        raise ServetuneError("--workload: give a preset (e.g. chat) or a JSONL file of your requests")
    if inp.goal == "capacity" and not inp.slos:
        raise ServetuneError("--goal capacity: give the SLOs it holds, e.g. --slo ttft:p99=1000")
    return entries, names


def _preset_why(name: str) -> str:
    preset = PRESETS[name]
    load = f"c{preset.concurrency}" if preset.rate is None else f"{preset.rate:g} req/s, bursty"
    return f"{preset.input_len} in / {preset.output_len} out, {load}"


def _shrunk_for_cpu(input_len: Any, output_len: Any, num_prompts: int | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if isinstance(input_len, int) and input_len > _CPU_MAX_INPUT:
        fields["input_len"] = _CPU_MAX_INPUT
    if isinstance(output_len, int) and output_len > _CPU_MAX_OUTPUT:
        fields["output_len"] = _CPU_MAX_OUTPUT
    if num_prompts is not None and num_prompts > _CPU_MAX_PROMPTS:
        fields["num_prompts"] = _CPU_MAX_PROMPTS
    return fields


def _context_needed(inp: DraftInput) -> int:
    """A max-model-len that holds the workload's longest request, as a power of two (CPU: KV memory)."""
    longest = 0
    for name in inp.presets:
        p = PRESETS.get(name)
        if p is not None:
            longest = max(longest, min(_int(p.input_len), _CPU_MAX_INPUT) + min(_int(p.output_len), _CPU_MAX_OUTPUT))
    if inp.workload is not None:
        longest = max(longest, int(inp.workload.input.max + inp.workload.output.max))
    length: int = 2 ** math.ceil(math.log2(max(longest, 256)))
    cap = inp.model.max_context
    return min(length, cap) if cap else length


def _int(length: Any) -> int:
    return length if isinstance(length, int) else _CPU_MAX_INPUT


def _replicates(inp: DraftInput) -> int:
    return 2 if inp.hardware.is_gpu else 3


def _slo_prompts(inp: DraftInput) -> int:
    """Requests a run of a tuning study needs for a finalist's two boots to show each percentile
    SLO met at all (analysis/slo_proof.py pools a config's requests over its boots); 0 for none."""
    if inp.goal == "capacity":
        return 0
    needed = [n for s in inp.slos if (n := requests_to_meet(s, inp.alpha)) is not None]
    return math.ceil(max(needed) / (2 * _replicates(inp))) if needed else 0


def _slo_prompts_note(inp: DraftInput) -> str:
    needed = max(n for s in inp.slos if (n := requests_to_meet(s, inp.alpha)) is not None)
    return (f"num_prompts {_slo_prompts(inp)}: an SLO is met only when its interval is inside the limit, and "
            f"that takes {needed} requests over a finalist's 2 boots x {_replicates(inp)} replicates")


def _capacity_prompts(inp: DraftInput) -> int:
    needed = [n for s in inp.slos if (n := requests_to_meet(s, inp.alpha)) is not None]
    return max([400, *needed])
