"""The options that make a command (bench, capacity) replay a recorded trace, and the scenario
they build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ServetuneError
from ..load.scenario import PRESETS, Scenario
from ..load.trace.spec import TraceSpec
from .boundary import validation_text

TRACE_HELP = "replay this recorded trace (Mooncake JSONL, Azure or BurstGPT CSV, a run's .requests.jsonl)"
TRACE_SET_HELP = ("a trace setting KEY=VALUE: format, start_s, duration_s, sample, max_requests, seed, "
                  "block_size, token_scale, cache_block_size; repeatable")
_SETTABLE = [k for k in TraceSpec.model_fields if k not in ("path", "speedup")]


def trace_spec(path: Path, sets: list[str], speedup: float = 1.0) -> TraceSpec:
    """--trace PATH, --trace-set KEY=VALUE ... and the speed-up, checked: a one-line error naming the option."""
    if not path.is_file():
        raise ServetuneError(f"--trace {path}: no such file")
    fields: dict[str, Any] = {"path": path, "speedup": speedup}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in _SETTABLE:
            raise ServetuneError(f"--trace-set {item!r}: expected KEY=VALUE with KEY one of {', '.join(_SETTABLE)}")
        fields[key.strip()] = value.strip()
    try:
        return TraceSpec.model_validate(fields)
    except ValidationError as exc:
        raise ServetuneError(f"--trace-set: {validation_text(exc, {'speedup': '--speedup'})}") from None


def trace_scenario(preset: str | None, spec: TraceSpec, **fields: Any) -> Scenario:
    """A scenario replaying `spec`; a `preset` gives its name and endpoint, `fields` (None: unset)
    the rest (num_prompts keeps the first N requests, concurrency caps those in flight)."""
    if preset is not None and preset not in PRESETS:
        raise ServetuneError(f"unknown scenario {preset!r}; presets: {', '.join(PRESETS)}")
    base: dict[str, Any] = {"name": preset or spec.path.stem.split(".")[0]}
    if preset is not None:
        base["endpoint"] = PRESETS[preset].endpoint
    given = {k: v for k, v in fields.items() if v is not None}
    try:
        return Scenario.model_validate({**base, **given, "trace": spec})
    except ValidationError as exc:
        raise ServetuneError(f"--trace {spec.path}: {validation_text(exc)}") from None
