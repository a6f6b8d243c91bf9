"""What differs between the two sides' resolved engine configuration, and which flag sets it back.

An upgrade changes more than its version: new defaults (async scheduling, a chunked-prefill
budget, a CUDA graph mode), another attention backend or sampler, new warnings. The field
reports found the regression by reading two boot logs side by side and toggling the new defaults
off; this module does the reading. Sources, per side:
- the boot log's resolved values (`BootFacts`: attention and MoE backends, async scheduling,
  budget, lengths, the KV cache, the MoE kernel config, sampler, the CUDA graph mode),
- the engine config line, its nested configs flattened (`compilation_config.cudagraph_mode`),
- the non-default args vLLM parsed (what was asked, launcher flags left out),
- the argument defaults of the side's own engine parser (`engine.defaults`, read with its Python),
- WARNING lines logged on every boot of one side and on none of the other, normalised first so
  that pids, ports, timestamps, paths and hashes do not make every line differ.
Each difference that a flag can set says so (`Difference.flag`), with each side's value as the
flag takes it, so `ab.explain` can boot the new version with the old side's value.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any

from ..engine.applied import applied_value
from ..engine.bootfacts import BootFacts, split_engine_config, split_repr_dict
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from .spec import SIDES

ABSENT = "-"
# Set by the launcher or naming the model: they differ between boots, not between engines.
_LAUNCHER_ARGS = {"host", "port", "model", "served_model_name", "tokenizer", "api_key"}
_ENGINE_CONFIG_IDENTITY = {"model", "tokenizer", "served_model_name"}
_OBJECT_REPR = re.compile(r"^\w+\((?P<body>.*)\)$", re.S)
_ENUM_REPR = re.compile(r"^<\w+\.(?P<name>\w+): [^>]*>$")


@dataclass(frozen=True)
class _Fact:
    label: str
    read: Callable[[BootFacts], Any]
    flag: str | None = None  # the parameter that sets it, where one does
    covers: str | None = None  # the engine config key it stands for (not listed twice)


def _flag_value(flag: str) -> Callable[[BootFacts], Any]:
    return lambda f: applied_value(flag, f)  # the resolved line, or a platform's forced value


def _moe_file(f: BootFacts) -> str | None:
    return PurePath(f.moe_config_file).name if f.moe_config_file else None  # each venv has its own path


_FACTS = (
    _Fact("attention backend", _flag_value("attention-backend"), "attention-backend"),
    _Fact("async scheduling", _flag_value("async-scheduling"), "async-scheduling"),
    _Fact("chunked-prefill budget (max_num_batched_tokens)", _flag_value("max-num-batched-tokens"),
          "max-num-batched-tokens"),
    _Fact("max model len", _flag_value("max-model-len"), "max-model-len", covers="max_seq_len"),
    _Fact("CUDA graph mode", lambda f: f.compilation_config.get("cudagraph_mode"),
          "compilation-config.cudagraph_mode", covers="compilation_config.cudagraph_mode"),
    _Fact("mamba cache mode", _flag_value("mamba-cache-mode"), "mamba-cache-mode"),
    _Fact("sampler", lambda f: f.sampler),
    _Fact("MoE backend", lambda f: f.moe_backend),
    _Fact("MoE kernel config file", _moe_file),
    _Fact("default MoE config (no tuned kernel config)", lambda f: f.default_moe_config or None),
    _Fact("KV cache size (tokens)", lambda f: f.kv_cache_tokens),
    _Fact("KV cache memory (GiB)", lambda f: f.kv_cache_memory_gib),
)


@dataclass(frozen=True)
class Difference:
    """One thing the two sides run differently. `a`/`b`: as shown (ABSENT when a side has none);
    `flag`: the study parameter that sets it (`async-scheduling`, `compilation-config.cudagraph_mode`),
    None when no flag does; `settings`: per side, the value that flag takes to run as that side."""

    source: str  # "boot log", "engine config", "requested", "argument default", "warning"
    what: str
    a: str
    b: str
    flag: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def value(self, side: str) -> str:
        return self.a if side == "A" else self.b


@dataclass(frozen=True)
class SideConfig:
    """What is known of one side: its boots' facts (in boot order), its parser's defaults, its flags."""

    facts: Sequence[BootFacts]
    defaults: EngineDefaults | None
    requested: Config


@dataclass(frozen=True)
class ConfigDiff:
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why
    flags: dict[str, list[str]] = field(default_factory=dict)  # per side, the flags its parser takes (empty: not read)

    def by_source(self, source: str) -> list[Difference]:
        return [d for d in self.differences if d.source == source]


def diff_sides(sides: Mapping[str, SideConfig]) -> ConfigDiff:
    """Every difference between side A and side B, in the report's order: the boot log's resolved
    values, the engine config line, the requested args, the parsers' defaults, one-side warnings."""
    notes: list[str] = []
    facts = {s: sides[s].facts[0] if sides[s].facts else None for s in SIDES}
    for s in SIDES:
        if facts[s] is None:
            notes.append(f"{s}: no boot log was parsed: its resolved configuration is unknown")
    out: list[Difference] = []
    fa, fb = facts["A"], facts["B"]
    if fa is not None and fb is not None:
        out += _fact_differences(fa, fb)
        out += _engine_config_differences(fa, fb)
        out += _requested_differences(fa, fb)
    defaults = {s: sides[s].defaults for s in SIDES}
    da, db = defaults["A"], defaults["B"]
    if da is not None and db is not None and da.known and db.known:
        requested = set(sides["A"].requested.flags) | set(sides["B"].requested.flags)
        out += _default_differences(da, db, requested)
    else:
        notes += [f"{s}: argument defaults not compared ({d.source if d is not None else 'not recorded'})"
                  for s, d in defaults.items() if d is None or not d.known]
    out += _warning_differences({s: sides[s].facts for s in SIDES})
    flags = {s: list(d.flags) if d is not None else [] for s, d in defaults.items()}
    known = set(flags["A"]) | set(flags["B"])
    if known:  # a key of the engine config line that neither parser takes is set by no flag
        out = [d if d.flag is None or d.flag.partition(".")[0] in known else replace(d, flag=None, settings={})
               for d in out]
    return ConfigDiff(out, notes, flags)


def _fact_differences(fa: BootFacts, fb: BootFacts) -> list[Difference]:
    out = []
    for fact in _FACTS:
        a, b = fact.read(fa), fact.read(fb)
        if _show(a) == _show(b):
            continue
        out.append(Difference("boot log", fact.label, _show(a), _show(b), fact.flag,
                              _settings(fact.flag, {"A": a, "B": b})))
    return out


def _engine_config_differences(fa: BootFacts, fb: BootFacts) -> list[Difference]:
    if not fa.engine_config or not fb.engine_config:
        return []
    covered = {f.covers for f in _FACTS if f.covers}
    flat = {s: flatten(f.engine_config) for s, f in (("A", fa), ("B", fb))}
    out = []
    for key in sorted(set(flat["A"]) | set(flat["B"])):
        if key in covered or key.split(".")[0] in _ENGINE_CONFIG_IDENTITY:
            continue
        a, b = flat["A"].get(key), flat["B"].get(key)
        if _show(a) == _show(b):
            continue
        flag = _engine_config_flag(key)
        out.append(Difference("engine config", key, _show(a), _show(b), flag, _settings(flag, {"A": a, "B": b})))
    return out


def _requested_differences(fa: BootFacts, fb: BootFacts) -> list[Difference]:
    """The non-default args vLLM parsed: what each side was asked (a difference here is the user's)."""
    a_args, b_args = fa.non_default_args, fb.non_default_args
    out = []
    for key in sorted((set(a_args) | set(b_args)) - _LAUNCHER_ARGS):
        a, b = a_args.get(key), b_args.get(key)
        if _show(a) != _show(b):
            out.append(Difference("requested", key.replace("_", "-"), _show(a), _show(b)))
    return out


def _default_differences(da: EngineDefaults, db: EngineDefaults, requested: set[str]) -> list[Difference]:
    """Flag by flag, each parser's default; a flag one version lacks shows ABSENT. Flags a side's
    config sets are left out: there the default does not run."""
    flags = {"A": set(da.flags) or set(da.values), "B": set(db.flags) or set(db.values)}
    every = flags["A"] | flags["B"]
    out = []
    for flag in sorted(every - requested - {"host", "port"}):
        if flag.startswith("no-") and flag[3:] in every:
            continue  # the negative spelling of a boolean flag: listed once, under its own name
        shown = {s: _default_text(flag, flags[s], d) for s, d in (("A", da), ("B", db))}
        if shown["A"] == shown["B"]:
            continue
        settings = {s: v for s, d in (("A", da), ("B", db)) if (v := d.default(flag)) is not None}
        out.append(Difference("argument default", f"--{flag}", shown["A"], shown["B"], flag, settings))
    return out


def _default_text(flag: str, flags: set[str], defaults: EngineDefaults) -> str:
    if flag not in flags:
        return ABSENT + " (no such flag)"
    value = defaults.default(flag)
    return "None (resolved at start-up)" if value is None else _show(value)


def _warning_differences(facts: Mapping[str, Sequence[BootFacts]]) -> list[Difference]:
    """Warnings on every boot of one side and on no boot of the other (one boot's chance warning,
    a shutdown race, is neither side's)."""
    if not facts["A"] or not facts["B"]:
        return []
    every: dict[str, set[str]] = {}
    ever: dict[str, set[str]] = {}
    for side in SIDES:
        boots = [{normalise_warning(w) for w in f.warnings} for f in facts[side]]
        every[side], ever[side] = set.intersection(*boots), set.union(*boots)
    out = []
    for side, other in (("A", "B"), ("B", "A")):
        for text in sorted(every[side] - ever[other]):
            shown = {side: "logged", other: ABSENT}
            out.append(Difference("warning", text, shown["A"], shown["B"]))
    return out


_VOLATILE = [
    (re.compile(r"\b(pid|port|count)([ =:]+)\d+", re.I), r"\1\2N"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?"), "<time>"),
    (re.compile(r"(?<![\w.])(?:\w+:)?(?:~|\.{1,2})?/[^\s'\",;)\]]+"), "<path>"),
    (re.compile(r"\b[0-9a-f]{8,}(?:-[0-9a-f]{4,})*\b", re.I), "<id>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<addr>"),
]


def normalise_warning(message: str) -> str:
    """A WARNING message with what changes from boot to boot (pids, ports, times, paths, hashes,
    addresses) replaced by placeholders, so the same warning on two boots reads the same."""
    text = message.strip()
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def flatten(config: Mapping[str, str], prefix: str = "") -> dict[str, str]:
    """The engine config line's items, with nested configs (`KernelConfig(moe_backend='auto', ...)`,
    `{'cudagraph_mode': ...}`) opened into dotted keys (`kernel_config.moe_backend`)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        text = value.strip()
        inner: dict[str, str] = {}
        if m := _OBJECT_REPR.match(text):
            inner = split_engine_config(m["body"])
        elif text.startswith("{"):
            inner = split_repr_dict(text)
        if inner:
            out.update(flatten(inner, name + "."))
        else:
            out[name] = text
    return out


def _engine_config_flag(key: str) -> str | None:
    """`enforce_eager` -> `enforce-eager`; `compilation_config.mode` -> `compilation-config.mode` (a
    field of a JSON flag); deeper keys are set by no single parameter. Whether the flag exists is
    the new side's parser's to say (ab.explain checks)."""
    parts = key.split(".")
    if len(parts) > 2:
        return None
    head = parts[0].replace("_", "-")
    return head if len(parts) == 1 else f"{head}.{parts[1]}"


def _settings(flag: str | None, values: Mapping[str, Any]) -> dict[str, Any]:
    if flag is None:
        return {}
    return {side: v for side, raw in values.items() if (v := as_setting(raw)) is not None}


def as_setting(value: Any) -> Any:
    """A value as a study parameter takes it (bool, number, word, mapping), from a log's repr text;
    None when it has none (None itself, an object repr, a list)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return value
    text = str(value).strip()
    if m := _ENUM_REPR.match(text):
        return m["name"]
    try:
        literal = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        # `dtype=torch.bfloat16`: the flag takes `bfloat16`
        return text.removeprefix("torch.") if re.fullmatch(r"[\w.\-]+", text) else None
    return literal if isinstance(literal, bool | int | float | str | dict) else None


def _show(value: Any) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, str):
        text = value.strip()
        if m := _ENUM_REPR.match(text):
            return m["name"]
        return text.strip("'\"")
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
