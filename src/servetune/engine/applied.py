"""Applied-vs-requested: did each requested flag really take effect?

A flag can be dropped or overridden without an error: the CPU platform forces
`async_scheduling = False`, a hybrid model resets the mamba cache mode, a too-small KV cache
caps the model length. Each requested flag is checked against every place the log shows it:
the "non-default args" dict (what the CLI parsed), the engine config line, and the lines that
report the resolved values (async scheduling, chunked prefill budget, max model len, ...).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from pydantic import BaseModel

from .bootfacts import BootFacts, split_engine_config, split_repr_dict
from .config import Config, FlagValue, normalize_flag_name, render_value

# Flags the launcher sets itself, that only name things, or secrets (passed as variables, see
# the engine profile's secret_flags); they say nothing about tuning.
_NOT_CHECKED = {"host", "port", "model", "served-model-name", "api-key", "hf-token", "uvicorn-log-level"}

# flag name -> BootFacts field that reports the value the engine resolved
_RESOLVED_FACTS = {
    "async-scheduling": "async_scheduling",
    "max-num-batched-tokens": "max_num_batched_tokens",
    "max-model-len": "max_model_len",
    "mamba-cache-mode": "mamba_cache_mode",
    "attention-backend": "attention_backend",
}
# flag name -> key in the engine config line, where the two differ
_ENGINE_CONFIG_KEY = {"max-model-len": "max_seq_len"}
# flags that are fields of the compilation config (shown inside the engine config line)
_COMPILATION_FLAGS = {"cudagraph-capture-sizes", "max-cudagraph-capture-size"}

# Overrides a platform applies without logging the result (vLLM 0.32 no longer prints the
# resolved async-scheduling state): (KV cache device, flag, value forced, where vLLM does it).
_PLATFORM_OVERRIDES: list[tuple[str, str, FlagValue, str]] = [
    ("CPU", "async-scheduling", False, "vLLM's CPU platform sets async_scheduling=False (platforms/cpu.py)"),
]


class AppliedMismatch(BaseModel):
    flag: str
    requested: Any
    applied: Any  # None: the log never showed the flag taking effect
    evidence_line: str | None
    reason: str


def check_applied(config: Config, facts: BootFacts) -> list[AppliedMismatch]:
    """Every requested flag whose effect the log contradicts or never shows."""
    out: list[AppliedMismatch] = []
    for name, requested in config.flags.items():
        flag = normalize_flag_name(name)
        if requested is None or flag in _NOT_CHECKED:
            continue
        out += _check_flag(flag, requested, facts)
    return out


def applied_value(flag: str, facts: BootFacts) -> Any | None:
    """The value the boot log shows `flag` resolved to (a resolved-value line, else the engine
    config line, as text), None when the log does not show it."""
    flag = normalize_flag_name(flag)
    fact = _RESOLVED_FACTS.get(flag)
    if fact is not None and getattr(facts, fact) is not None:
        return getattr(facts, fact)
    for device, forced_flag, forced, _ in _PLATFORM_OVERRIDES:
        if flag == forced_flag and facts.kv_cache_device == device:
            return forced  # forced by the platform, whatever was asked
    return facts.engine_config.get(_ENGINE_CONFIG_KEY.get(flag, flag.replace("-", "_")))


def took_effect(flag: str, requested: FlagValue, facts: BootFacts) -> bool:
    """The log does not contradict the requested value of `flag`."""
    return not _check_flag(normalize_flag_name(flag), requested, facts)


def _check_flag(flag: str, requested: FlagValue, facts: BootFacts) -> list[AppliedMismatch]:
    key = flag.replace("-", "_")
    found: list[AppliedMismatch] = []

    parsed = facts.non_default_args
    if parsed:
        if key not in parsed:
            found.append(AppliedMismatch(
                flag=flag, requested=requested, applied=None,
                evidence_line=facts.evidence.get("non_default_args"),
                reason="requested, but absent from vLLM's non-default args (dropped, or equal to the default)",
            ))
        elif not same_value(requested, parsed[key]):
            found.append(AppliedMismatch(
                flag=flag, requested=requested, applied=parsed[key],
                evidence_line=facts.evidence.get("non_default_args"),
                reason="vLLM parsed a different value",
            ))

    fact = _RESOLVED_FACTS.get(flag)
    if fact is not None:
        applied = getattr(facts, fact)
        # A flag the log resolves but never reported (e.g. no async-scheduling line) is unproven.
        if applied is not None and not same_value(requested, applied):
            found.append(AppliedMismatch(
                flag=flag, requested=requested, applied=applied,
                evidence_line=facts.evidence.get(fact), reason="overridden: the engine resolved another value",
            ))
        if applied is not None:
            return found

    for device, forced_flag, forced, why in _PLATFORM_OVERRIDES:
        if flag == forced_flag and facts.kv_cache_device == device and not same_value(requested, forced):
            found.append(AppliedMismatch(
                flag=flag, requested=requested, applied=forced,
                evidence_line=facts.evidence.get("kv_cache_tokens"), reason=f"overridden: {why}",
            ))
            return found

    if flag == "compilation-config" and isinstance(requested, dict):
        for sub, value in requested.items():
            found += _compare_compilation(f"{flag}.{sub}", sub, value, facts)
        return found
    if flag in _COMPILATION_FLAGS:
        return found + _compare_compilation(flag, key, requested, facts)

    ec_key = _ENGINE_CONFIG_KEY.get(flag, key)
    if ec_key in facts.engine_config and _comparable(requested):
        applied_text = facts.engine_config[ec_key]
        if not same_value(requested, applied_text):
            found.append(AppliedMismatch(
                flag=flag, requested=requested, applied=applied_text,
                evidence_line=facts.evidence.get("engine_config"),
                reason="the engine config line shows another value",
            ))
    return found


def _compare_compilation(flag: str, key: str, requested: Any, facts: BootFacts) -> list[AppliedMismatch]:
    applied = facts.compilation_config.get(key)
    if applied is None or same_value(requested, applied):
        return []
    return [AppliedMismatch(
        flag=flag, requested=requested, applied=applied, evidence_line=facts.evidence.get("engine_config"),
        reason="overridden: the engine's compilation config shows another value",
    )]


def _comparable(value: FlagValue) -> bool:
    """Engine-config values are reprs: only scalars compare meaningfully ('auto' resolves)."""
    return isinstance(value, (bool, int, float)) or (isinstance(value, str) and value != "auto")


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def as_number(value: Any) -> float | None:
    """Numbers as vLLM's CLI reads them, including its '1k' (decimal) / '1K' (binary) suffixes."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip().replace(",", "")
    if m := _HUMAN_INT.fullmatch(text):
        return float(m[1]) * (_DECIMAL.get(m[2]) or _BINARY[m[2]])
    try:
        return float(text)
    except ValueError:
        return None


_OBJECT_REPR = re.compile(r"\w+\((?P<body>.*)\)", re.S)
_ENUM_REPR = re.compile(r"<\w+\.(?P<name>\w+): '?(?P<value>[^'>]*)'?>")


def same_value(requested: Any, applied: Any) -> bool:
    """Does the value vLLM shows (parsed, or repr text) equal the requested one?"""
    if isinstance(requested, str):
        requested = _json_or_text(render_value(requested))  # "2GiB" went in as bytes, '{"a":1}' as JSON
    if isinstance(applied, str) and (m := _ENUM_REPR.fullmatch(applied.strip())):
        return str(requested).upper() in (m["name"], m["value"].upper())
    if isinstance(requested, (list, dict)) and isinstance(applied, str) and applied[:1] in "[{(":
        try:
            applied = ast.literal_eval(applied)
        except (ValueError, SyntaxError):
            pass
    if isinstance(requested, bool) or isinstance(applied, bool):
        return str(requested).lower() == str(applied).lower()
    a, b = as_number(requested), as_number(applied)
    if a is not None and b is not None:
        return a == b
    if isinstance(requested, dict):
        if isinstance(applied, str) and (m := _OBJECT_REPR.fullmatch(applied.strip())):
            applied = split_engine_config(m["body"])  # "CompilationConfig(mode=3, ...)"
        elif isinstance(applied, str) and applied.strip().startswith("{"):
            applied = split_repr_dict(applied)  # "{'mode': <CompilationMode.VLLM_COMPILE: 3>, ...}"
        if isinstance(applied, dict):
            return all(k in applied and same_value(v, applied[k]) for k, v in requested.items())
        return True
    if isinstance(requested, list) and isinstance(applied, (list, tuple)):
        return len(requested) == len(applied) and all(map(same_value, requested, applied))
    return _strip_torch(str(requested)) == _strip_torch(str(applied))


def _json_or_text(text: str) -> Any:
    """A JSON object or list given as text (study spaces hold scalars) is compared as what it says."""
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _strip_torch(text: str) -> str:
    return text.removeprefix("torch.").strip("'\"")
