"""Failure classification on log excerpts of real vLLM failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.classify import classify_failure
from servetune.vocabulary import Outcome

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def log(name: str) -> str:
    return (LOGS / name).read_text(errors="replace")


def test_unknown_flag_is_invalid_arg() -> None:
    f = classify_failure(log("vllm032-cpu-unknown-flag.log"), 2)
    assert f.outcome is Outcome.invalid_arg
    assert f.evidence == ["api_server.py: error: unrecognized arguments: --bogus-flag"]


def test_unparseable_value_is_invalid_arg() -> None:
    f = classify_failure(log("vllm032-cpu-invalid-value.log"), 2)
    assert f.outcome is Outcome.invalid_arg
    assert "--kv-cache-memory-bytes: Value 1GiB cannot be converted" in f.detail


def test_context_too_long_extracts_estimate() -> None:
    f = classify_failure(log("vllm032-cpu-context-too-long.log"), 1)
    assert f.outcome is Outcome.context_too_long
    assert f.estimated_max_model_len == 3968
    assert "3968" in f.detail
    assert all("estimated maximum model length is 3968" in line for line in f.evidence)


@pytest.mark.parametrize(("line", "outcome"), [
    # texts of vLLM's own messages (v1/core/kv_cache_utils.py, torch, argparse, pydantic)
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
     "when initializing the engine.", Outcome.oom),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", Outcome.oom),
    ("ValueError: Available memory on node 0 (1.0/15.84 GiB) on kv cache allocation is less than "
     "requested memory for kv (64.0 GiB).", Outcome.oom),
    ("api_server.py: error: argument --dtype: invalid choice: 'f8' (choose from auto, bfloat16)", Outcome.invalid_arg),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig", Outcome.invalid_arg),
    ("OSError: [Errno 98] Address already in use", Outcome.port_in_use),
])
def test_single_line_patterns(line: str, outcome: Outcome) -> None:
    text = f"(EngineCore pid=1) INFO 11-30 08:00:00 [x.py:1] starting\n{line}\n"
    assert classify_failure(text, 1).outcome is outcome


def test_validation_error_evidence_includes_the_field_lines() -> None:
    text = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig\n"
            "max_num_seqs\n  Input should be greater than 0 [type=greater_than, input_value=-1]\n")
    f = classify_failure(text, 1)
    assert f.outcome is Outcome.invalid_arg
    assert any("greater than 0" in line for line in f.evidence)


def test_unknown_death_is_crashed_with_exit_code() -> None:
    f = classify_failure("RuntimeError: something odd\n", -9)
    assert f.outcome is Outcome.crashed
    assert "-9" in f.detail and f.evidence == ["RuntimeError: something odd"]


def test_engine_config_validation_error_is_invalid_arg() -> None:
    # `--max-num-seqs 0` passes argparse and fails in vLLM's pydantic SchedulerConfig
    f = classify_failure(log("vllm032-cpu-validation-error.log"), 1)
    assert f.outcome is Outcome.invalid_arg
    assert "2 validation errors for SchedulerConfig" in f.detail
    assert "max_num_seqs" in [line.strip() for line in f.evidence]
