"""What each request of a Run asks for: lengths sampled from the Scenario, or a JSONL dataset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ServetuneError
from .classes import class_order
from .scenario import Fixed, FromFile, Length, Normal, Scenario, Uniform
from .trace.jsonl import json_lines
from .trace.window import load_replay


@dataclass(frozen=True)
class RequestSpec:
    """One request before prompt synthesis: target lengths, or a given prompt text."""

    input_len: int | None   # None: a dataset prompt, counted by the tokenizer
    output_len: int
    prompt: str | None = None
    # A trace's request (load/trace/): its prefix blocks, its arrival at speed-up 1, and the
    # position of its session's previous turn, whose answer it waits for, plus `delay_s`.
    hash_ids: tuple[int, ...] | None = None
    offset_s: float | None = None
    follows: int | None = None
    delay_s: float = 0.0
    traffic_class: str | None = None   # a mixed scenario's class or a trace's request type (load/classes.py)


def _read_int_file(path: Path) -> np.ndarray:
    values: list[int] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ServetuneError(f"cannot read length file {path}: {exc}") from exc
    for lineno, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            v = int(s)
        except ValueError:
            raise ServetuneError(f"{path}:{lineno}: expected one integer per line, got {s!r}") from None
        if v < 1:
            raise ServetuneError(f"{path}:{lineno}: length must be >= 1, got {v}")
        values.append(v)
    if not values:
        raise ServetuneError(f"{path}: no lengths in the file")
    return np.asarray(values)


def sample_lengths(spec: Length, n: int, rng: np.random.Generator) -> list[int]:
    """n lengths from a fixed value or a distribution; normal draws are rounded and kept >= 1."""
    if isinstance(spec, int):
        return [spec] * n
    if isinstance(spec, Fixed):
        return [spec.value] * n
    if isinstance(spec, Uniform):
        lo, hi = sorted((spec.low, spec.high))
        return _ints(rng.integers(lo, hi + 1, size=n))
    if isinstance(spec, Normal):
        return _ints(np.maximum(np.rint(rng.normal(spec.mean, spec.std, size=n)), 1).astype(int))
    if isinstance(spec, FromFile):
        return _ints(rng.choice(_read_int_file(spec.path), size=n).astype(int))
    raise TypeError(f"unknown length spec {spec!r}")


def _ints(values: np.ndarray) -> list[int]:
    """An integer array as a list of Python ints (numpy types `tolist()` as Any)."""
    out: list[int] = values.tolist()
    return out


def read_dataset(path: Path) -> list[RequestSpec]:
    """JSONL, one request a line: {"prompt": str, "output_len"?: int} or {"input_len", "output_len"}."""
    specs: list[RequestSpec] = []
    for where, row in json_lines(path, "dataset"):
        out = row.get("output_len", row.get("max_tokens"))
        if "prompt" in row:
            if not isinstance(row["prompt"], str) or not row["prompt"]:
                raise ServetuneError(f"{where}: 'prompt' must be a non-empty string")
            specs.append(RequestSpec(None, _positive(out if out is not None else 256, where, "output_len"),
                                     row["prompt"]))
        elif "input_len" in row and out is not None:
            specs.append(RequestSpec(_positive(row["input_len"], where, "input_len"),
                                     _positive(out, where, "output_len")))
        else:
            raise ServetuneError(f"{where}: need 'prompt' or both 'input_len' and 'output_len'")
    if not specs:
        raise ServetuneError(f"{path}: the dataset is empty")
    return specs


def _positive(value: object, where: str, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ServetuneError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def trace_specs(scenario: Scenario) -> list[RequestSpec]:
    """A trace scenario's requests, in the order of their arrivals (num_prompts keeps the first N)."""
    assert scenario.trace is not None
    requests = load_replay(scenario.trace).requests[: scenario.num_prompts]
    return [RequestSpec(r.input_len, r.output_len, hash_ids=r.hash_ids, offset_s=r.offset_s, follows=r.follows,
                        delay_s=r.delay_s, traffic_class=r.traffic_class) for r in requests]


def unshared(specs: list[RequestSpec], n: int) -> list[RequestSpec]:
    """n requests of the lengths of `specs` (cycled), sharing nothing: warmups that leave no
    prefix of the trace in the server's cache."""
    return [RequestSpec(specs[i % len(specs)].input_len, specs[i % len(specs)].output_len) for i in range(n)]


def request_specs(scenario: Scenario, n: int, rng: np.random.Generator) -> list[RequestSpec]:
    """The first n requests of the scenario (a dataset cycles when n exceeds its size)."""
    if scenario.sweep_input_lens:
        lens = scenario.sweep_input_lens
        outs = sample_lengths(scenario.output_len, len(lens), rng)
        return [RequestSpec(i, o) for i, o in zip(lens, outs)][:n] if n else []
    if scenario.dataset is not None:
        rows = read_dataset(scenario.dataset)
        return [rows[i % len(rows)] for i in range(n)]
    if scenario.classes is not None:
        return _class_specs(scenario, n, rng)
    ins = sample_lengths(scenario.input_len, n, rng)
    outs = sample_lengths(scenario.output_len, n, rng)
    return [RequestSpec(i, o) for i, o in zip(ins, outs)]


def _class_specs(scenario: Scenario, n: int, rng: np.random.Generator) -> list[RequestSpec]:
    """A mixed scenario's first n requests: each its class's lengths, tagged with the class."""
    assert scenario.classes is not None
    order = class_order(scenario, n, rng)
    drawn = {name: iter(zip(sample_lengths(tc.input_len, order.count(name), rng),
                            sample_lengths(tc.output_len, order.count(name), rng)))
             for name, tc in scenario.classes.items()}
    specs = []
    for name in order:
        input_len, output_len = next(drawn[name])
        specs.append(RequestSpec(input_len, output_len, traffic_class=name))
    return specs
