"""Numbers a study cannot mean are refused at load, with file, line and key: zero-token prompts,
non-positive SLOs, absurd replicate counts, non-positive rates, budgets, concurrency, counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.errors import ServetuneError
from servetune.study import parse_study

TEXT = (Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml").read_text()

# (what, text to replace, replacement, expected key path in the message, text on the reported line)
BAD_NUMBERS = [
    ("zero input_len", "input_len: 128", "input_len: 0", "scenarios[0].input_len", "input_len: 0"),
    ("negative output_len", "output_len: 96", "output_len: -5", "scenarios[1].output_len", "output_len: -5"),
    ("uniform low above high", "input_len: 128\n    output_len: 96",
     "input_len: {kind: uniform, low: 64, high: 8}\n    output_len: 96",
     "scenarios[1].input_len", "kind: uniform"),
    ("negative SLO", "slo: {p90_ttft_ms: 5000}", "slo: {p99_ttft_ms: -1}", "objective.slo.p99_ttft_ms", "slo:"),
    ("zero SLO of one scenario", "slo: {p90_ttft_ms: 5000}", "slo:\n    burst: {p99_ttft_ms: 0}",
     "objective.slo.burst.p99_ttft_ms", "burst: {p99_ttft_ms: 0}"),
    ("NaN SLO", "slo: {p90_ttft_ms: 5000}", "slo: {p99_ttft_ms: .nan}", "objective.slo.p99_ttft_ms", "slo:"),
    ("zero replicates", "replicates: 3", "replicates: 0", "replicates", "replicates: 0"),
    ("negative replicates", "replicates: 3", "replicates: -2", "replicates", "replicates: -2"),
    ("absurd replicates", "replicates: 3", "replicates: 5000", "replicates", "replicates: 5000"),
    ("absurd adaptive max", "replicates: 3", "replicates: {min: 2, max: 100000}", "replicates.max", "replicates:"),
    ("negative trial budget", "budget: {trials: 12", "budget: {trials: -3", "budget.trials", "budget:"),
    ("negative wall budget", "wall_minutes: 90", "wall_minutes: -90", "budget.wall_minutes", "budget:"),
    ("zero rate", "concurrency: 8", "rate: 0", "scenarios[1].rate", "rate: 0"),
    ("zero concurrency", "concurrency: 8", "concurrency: 0", "scenarios[1].concurrency", "concurrency: 0"),
    ("zero num_prompts", "num_prompts: 24", "num_prompts: 0", "scenarios[1].num_prompts", "num_prompts: 0"),
    ("infinite duration", "num_prompts: 24", "duration_s: .inf", "scenarios[1].duration_s", "duration_s"),
    ("negative startup timeout", "startup_timeout_s: 600", "startup_timeout_s: -1", "engine.startup_timeout_s",
     "startup_timeout_s"),
    ("infinite startup timeout", "startup_timeout_s: 600", "startup_timeout_s: .inf", "engine.startup_timeout_s",
     "startup_timeout_s"),
    ("infinite weight", "weights: {single-decode: 1, burst: 1}", "weights: {single-decode: .inf, burst: 1}",
     "objective.weights.single-decode", "weights:"),
]


@pytest.mark.parametrize(("what", "old", "new", "key", "line_text"), BAD_NUMBERS, ids=[b[0] for b in BAD_NUMBERS])
def test_bad_number_names_file_line_and_key(what: str, old: str, new: str, key: str, line_text: str) -> None:
    assert old in TEXT
    text = TEXT.replace(old, new, 1)
    with pytest.raises(ServetuneError) as info:
        parse_study(text, "study.yaml")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if line_text in t)
    assert f"study.yaml:{line}: {key}: " in str(info.value), str(info.value)
    assert len(str(info.value).splitlines()) == 1, str(info.value)


def test_sensible_bounds_still_load() -> None:
    text = (TEXT.replace("replicates: 3", "replicates: 1000").replace("input_len: 128", "input_len: 1")
            .replace("slo: {p90_ttft_ms: 5000}", "slo: {p99_ttft_ms: 0.5}").replace("concurrency: 8", "rate: .inf"))
    spec = parse_study(text, "study.yaml")
    assert spec.replicates.max == 1000 and spec.scenarios[0].input_len == 1
