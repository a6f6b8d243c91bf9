"""A user's traffic as a JSONL file (their prompts, or their lengths) summarised as a scenario's
length distributions, for `servetune init`.

Each line is what a scenario's `dataset` takes (load/dataset.py): `{"prompt": ..., "output_len"?}`
or `{"input_len", "output_len"}`; a prompt is counted with the model's tokenizer.json when there
is one, else at 4 characters a token (English text's usual ratio). The summary is a normal
distribution per length (mean and sd, clipped at 1 token when sampled) plus the percentiles the
written file's comment shows, so a user can see what the fit leaves out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..load.dataset import read_dataset

_CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class LengthSummary:
    mean: float
    std: float
    p50: float
    p90: float
    max: float

    def as_yaml(self) -> dict[str, object]:
        if self.std < 1:
            return {"kind": "fixed", "value": max(round(self.mean), 1)}
        return {"kind": "normal", "mean": round(self.mean, 1), "std": round(self.std, 1)}

    def describe(self) -> str:
        return f"mean {self.mean:.0f}, p50 {self.p50:.0f}, p90 {self.p90:.0f}, max {self.max:.0f}"


@dataclass(frozen=True)
class Workload:
    requests: int
    input: LengthSummary
    output: LengthSummary
    counted_by: str  # how prompt lengths were counted


def summarise(path: Path, tokenizer_dir: Path | None) -> Workload:
    rows = read_dataset(path)
    count, counted_by = _counter(tokenizer_dir, any(r.prompt is not None for r in rows))
    inputs = [r.input_len if r.input_len is not None else count(r.prompt or "") for r in rows]
    outputs = [r.output_len for r in rows]
    return Workload(len(rows), _summary(inputs), _summary(outputs), counted_by)


def _summary(values: list[int]) -> LengthSummary:
    arr = np.asarray(values, dtype=float)
    return LengthSummary(float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
                         float(np.percentile(arr, 50)), float(np.percentile(arr, 90)), float(arr.max()))


def _counter(tokenizer_dir: Path | None, needed: bool) -> tuple[Callable[[str], int], str]:
    if needed and tokenizer_dir is not None and (tokenizer_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        return (lambda text: max(len(tok.encode(text, add_special_tokens=False).ids), 1)), \
            "the model's tokenizer.json"
    return (lambda text: max(round(len(text) / _CHARS_PER_TOKEN), 1)), \
        f"{_CHARS_PER_TOKEN:g} characters a token (no tokenizer.json at hand)"
