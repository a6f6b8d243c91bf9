"""The study file's reference, generated from the pydantic models that load it, so it cannot drift.

One table per section (StudySpec, then every model reached from its fields): key, type, default,
and what it means. The meaning is the field's `description` where it has one, else the comment
written above (or beside) the field in the model's source, the same text an engineer reads there.
The docs site builds its "Study file reference" page from `study_reference()` (scripts/mkdocs_hooks.py).
"""

from __future__ import annotations

import inspect
import re
import types
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from ..load.scenario import PRESETS
from .draft import flow
from .spec import StudySpec

_FIELD_LINE = re.compile(r"^\s+(\w+)\s*:")


def study_reference() -> str:
    """Markdown: a table per section of the study file, StudySpec first."""
    sections: list[tuple[str, type[BaseModel]]] = [("top level", StudySpec)]
    seen: set[type[BaseModel]] = {StudySpec}
    out = [
        "# Study file reference",
        "",
        "Generated from the pydantic models that load a study file (`servetune.study.reference`),",
        "so every key, type and default here is the code's. A study file is YAML; unknown keys are",
        "errors, reported with file, line and key. `servetune init` writes a commented one.",
        "",
    ]
    i = 0
    while i < len(sections):
        where, model = sections[i]
        i += 1
        out += _section(where, model)
        for name, info in model.model_fields.items():
            for sub in _models_in(info.annotation):
                if sub not in seen:
                    seen.add(sub)
                    sections.append((f"{where}.{name}" if where != "top level" else name, sub))
    return "\n".join(out + _presets()) + "\n"


def _presets() -> list[str]:
    """The scenario presets a `preset:` key names, with their fields."""
    lines = ["## Scenario presets", "",
             "`scenarios: [{preset: NAME, ...}]` starts from one of these; any field given beside it wins.", "",
             "| preset | input tokens | output tokens | load | requests | endpoint |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, p in PRESETS.items():
        inputs = (f"{p.sweep_input_lens[0]} … {p.sweep_input_lens[-1]} (one each)" if p.sweep_input_lens
                  else str(p.input_len))
        load = (f"{p.rate:g} req/s, burstiness {p.burstiness:g}" if p.rate is not None
                else f"{p.concurrency} at a time")
        lines.append(f"| `{name}` | {inputs} | {p.output_len} | {load} | {p.num_prompts or '-'} | {p.endpoint} |")
    return [*lines, ""]


def _section(where: str, model: type[BaseModel]) -> list[str]:
    doc = inspect.cleandoc(model.__doc__ or "").replace("\n", " ")
    lines = [f"## `{where}` ({model.__name__})", ""]
    if doc and not doc.startswith(f"{model.__name__}("):
        lines += [doc, ""]
    lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    comments = _source_comments(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        meaning = info.description or comments.get(name) or MEANINGS.get(f"{model.__name__}.{name}", "")
        lines.append(f"| `{key}` | {_cell(type_text(info.annotation))} | {_cell(_default(info))} | "
                     f"{_cell(meaning)}{_bounds(info)} |")
    return [*lines, ""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        try:
            value = info.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(its defaults)"
    if isinstance(value, Enum):
        value = value.value
    return f"`{flow(value)}`"


def _bounds(info: FieldInfo) -> str:
    limits = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >=")):
            value = getattr(meta, attr, None)
            if value is not None:
                limits.append(f"{sign} {value}")
    return f" ({', '.join(limits)})" if limits else ""


def type_text(tp: Any) -> str:
    """A readable type: `int | null`, `list[string]`, `one of: a, b`."""
    origin = get_origin(tp)
    if origin is Annotated:
        return type_text(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in get_args(tp))
    if origin is Literal:
        return "one of: " + ", ".join(f"`{a}`" for a in get_args(tp))
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        key, value = get_args(tp)
        return f"mapping {type_text(key)} → {type_text(value)}"
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"{tp.__name__} (below)"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in names:
        return names[tp]
    return getattr(tp, "__name__", str(tp))


def _models_in(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in get_args(tp) for m in _models_in(arg)]


def _source_comments(model: type[BaseModel]) -> dict[str, str]:
    """field -> the `#` comment lines right above its line in the class body, or the one beside it."""
    try:
        source = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    above: list[str] = []
    for line in source:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD_LINE.match(line)
        if match and match.group(1) in model.model_fields and match.group(1) not in found:
            beside = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join(above) or beside
            if text:
                found[match.group(1)] = text
        above = []
    return found


# Meanings of the fields whose model says nothing beside them (no description, no comment). A
# test checks that every key here is a field and that every field of the reference has a meaning.
MEANINGS: dict[str, str] = {
    "StudySpec.name": "the study's name: letters, digits, `_`, `.`, `-`",
    "StudySpec.engine": "what to launch: the baseline's command, model, flags and environment",
    "StudySpec.space": "the flags (or `env.NAME` variables) to search: a list of values (`null`: the flag not "
                       "given), or a range `{low, high, step | log, type}`; `FLAG.field` sweeps one field of a "
                       "JSON flag the baseline gives",
    "StudySpec.constraints": "rules every candidate must satisfy, e.g. `max-num-batched-tokens >= max-model-len` "
                             "or `kv-cache-dtype != fp8_e5m2`",
    "StudySpec.scenarios": "the traffic each config is measured on: a `preset` with any field overridden, or a "
                           "full scenario",
    "StudySpec.objective": "what to maximise or minimise, how scenarios combine, and the SLOs",
    "StudySpec.strategy": "how candidates are picked: baseline only, one factor at a time, the whole grid, or "
                          "Optuna TPE",
    "StudySpec.replicates": "runs of each scenario on one boot: a number or `{min, max, target_rel_ci}`",
    "StudySpec.budget": "when the search stops (may change on resume)",
    "StudySpec.parallel": "trials at once on this host (may change on resume)",
    "StudySpec.finalists": "best candidates booted again, each beside a fresh baseline boot, before a winner is "
                           "named (0: none, and no winner can be proven)",
    "StudySpec.alpha": "significance level of the intervals and the Holm-corrected tests",
    "StudySpec.seed": "seed of the strategy and the prompts",
    "StudySpec.capacity": "how `maximize: capacity` searches each scenario's load level on a boot",
    "EngineSpec.command": "the launch command before the flags (default: the engine's launcher module); a bare "
                          "`python`/`python3` is servetune's own interpreter; also `[vllm, serve]` or "
                          "`[docker, run, ..., IMAGE]` for vLLM",
    "EngineSpec.model": "a local model directory or a Hugging Face id",
    "EngineSpec.args": "the baseline's flags (`max-num-seqs: 64`; booleans render as `--x` / `--no-x`, for "
                       "SGLang `--x` / nothing; mappings as JSON, IEC sizes like `2GiB` in bytes)",
    "EngineSpec.env": "the server's environment variables (secret-looking names are taken out and never stored)",
    "EngineSpec.startup_timeout_s": "the cap, in seconds from launch, of a boot whose log keeps moving "
                                    "(loading, compiling, capturing): past it the boot fails as `startup_timeout`",
    "EngineSpec.startup_stall_s": "seconds the boot log may stay silent before the boot fails as "
                                  "`startup_timeout`, naming the phase it stopped in (a cold first boot of many "
                                  "minutes that keeps logging is waited for)",
    "EngineSpec.port": "a fixed port for the first slot (slot i uses port + i); default: a free one",
    "EngineSpec.served_model_name": "the name the server answers to (default: the model)",
    "Parameter.values": "the values to try, in order (a list may be written in place of the mapping)",
    "Parameter.low": "a range's lowest value",
    "Parameter.high": "a range's highest value",
    "Parameter.step": "a range's step (ofat and grid try low, low+step, ..., high)",
    "Parameter.log": "a log-scale range (values double from low)",
    "Parameter.type": "the range's number type (default: from low, high and step)",
    "Constraint.expr": "a comparison of two parameters or a parameter and a number, e.g. `max-num-seqs <= 256`",
    "Constraint.when": "apply only to configs with these parameter values",
    "Scenario.name": "the scenario's name in reports, weights and per-scenario SLOs",
    "Scenario.input_len": "prompt tokens: a number or a distribution (`{kind: uniform | normal | fixed | file}`)",
    "Scenario.output_len": "answer tokens: a number or a distribution",
    "Scenario.rate": "open loop: requests a second (Poisson, or gamma with `burstiness`); `inf`: all at once",
    "Scenario.burstiness": "shape of the gamma gaps between arrivals: 1 is Poisson, below 1 burstier",
    "Scenario.num_prompts": "requests measured a run",
    "Scenario.duration_s": "run for this long instead of a number of requests",
    "Scenario.seed": "seed of the lengths, the arrivals and the prompts' nonces",
    "Scenario.ignore_eos": "decode exactly `output_len` tokens (as `vllm bench serve` does)",
    "Scenario.shared_prefix": "a common prefix that a share of the requests start with (prefix caching)",
    "Scenario.endpoint": "`/v1/completions` or `/v1/chat/completions`",
    "Scenario.sweep_timeout_s": "with `sweep_input_lens`: a prompt size with no first token within this is "
                                "recorded as timed out for that size, and the sweep goes on (`prefill-sweep`: 120)",
    "Scenario.run_timeout_s": "a run still going after this long is ended as `run_timeout` (default: derived "
                              "from the traffic)",
    "ObjectiveSpec.maximize": "a `vllm bench serve` metric (`output_throughput`, ...) or `capacity`",
    "ObjectiveSpec.minimize": "a latency metric to minimise instead (`mean_ttft_ms`, ...)",
    "ObjectiveSpec.combine": "scenarios' ratios to the baseline combined as a weighted geometric mean, or the "
                             "worst one",
    "ObjectiveSpec.weights": "scenario name -> weight (default 1 each)",
    "Replicates.min": "runs a boot at least",
    "Replicates.max": "runs a boot at most",
    "Replicates.target_rel_ci": "stop between min and max once the objective's interval is this narrow "
                                "(relative half-width)",
    "Budget.trials": "candidate boots at most (duplicates decided without a boot do not count)",
    "Budget.wall_minutes": "wall-clock minutes at most, over every session of the study",
    "Parallel.slots": "trials at once; each slot measures its own baseline",
    "Parallel.gpus_per_trial": "GPUs each slot's server sees (0: the CPU build; slots then split the CPUs)",
    "CapacitySpec.max_levels": "load levels a search measures at most",
    "Fixed.kind": "`fixed`",
    "Fixed.value": "the length",
    "Uniform.kind": "`uniform`",
    "Uniform.low": "shortest length",
    "Uniform.high": "longest length",
    "Normal.kind": "`normal` (draws rounded, at least 1)",
    "Normal.mean": "mean length",
    "Normal.std": "standard deviation",
    "FromFile.kind": "`file`",
    "FromFile.path": "a file of lengths, one integer a line, drawn from at random",
    "SharedPrefix.share": "the share of requests that start with the prefix",
    "TrafficClass.input_len": "the class's prompt tokens: a number or a distribution",
    "TrafficClass.output_len": "the class's answer tokens: a number or a distribution",
    "TrafficClass.share": "the class's part of `num_prompts`, a weight (3 and 1: three quarters and one)",
    "TrafficClass.rate": "the class's own arrivals in req/s; the scenario's rate is the classes' sum",
}
