"""The context oracle on real boot-log fixtures and on a fake engine with a known KV capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.engine.base import StartResult
from servetune.engine.bootfacts import parse_boot_facts
from servetune.engine.classify import classify_failure
from servetune.probe.context import AUTO, ProbeBoot, find_max_model_len, model_max_len, probe_boot
from servetune.vocabulary import Outcome

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _log(name: str) -> str:
    return (LOGS / name).read_text(errors="replace")


def test_failed_boot_carries_vllms_estimate() -> None:
    text = _log("vllm032-cpu-context-too-long.log")
    failure = classify_failure(text, 1)
    result = StartResult(outcome=failure.outcome, boot_facts=parse_boot_facts(text), detail=failure.detail,
                         estimated_max_model_len=failure.estimated_max_model_len)
    b = probe_boot(16384, result)
    assert (b.outcome, b.estimate, b.ran_at) == ("context_too_long", 3968, None)


def test_healthy_boot_gives_the_concurrency_headroom() -> None:
    # "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x"
    result = StartResult(outcome=Outcome.ok, boot_facts=parse_boot_facts(_log("vllm032-cpu-async-mbt1024.log")))
    b = probe_boot(2048, result)
    assert (b.ran_at, b.kv_cache_tokens, b.safe_length) == (2048, 1_048_576, 1_048_576)


class FakeEngine:
    """One request of up to `capacity` tokens fits; vLLM's answers switched on or off."""

    def __init__(self, capacity: int, model_max: int, *, auto: bool = True, estimates: bool = True) -> None:
        self.capacity, self.model_max, self.auto, self.estimates = capacity, model_max, auto, estimates
        self.asked: list[int] = []

    def _ok(self, length: int, requested: int) -> ProbeBoot:
        # vLLM prints the concurrency with two decimals, so X·Y can overshoot by a little
        return ProbeBoot(requested=requested, outcome="ok", ran_at=length, kv_cache_tokens=self.capacity,
                         max_concurrency=round(self.capacity / length, 2), max_concurrency_tokens=length)

    def __call__(self, length: int) -> ProbeBoot:
        self.asked.append(length)
        if length == AUTO:
            if not self.auto:
                return ProbeBoot(requested=length, outcome="invalid_arg", detail="argument --max-model-len: invalid")
            return self._ok(min(self.capacity, self.model_max), length)
        if length > self.model_max:
            return ProbeBoot(requested=length, outcome="invalid_arg", detail="greater than the derived max_model_len")
        if length <= self.capacity:
            return self._ok(length, length)
        return ProbeBoot(requested=length, outcome="context_too_long",
                         estimate=self.capacity if self.estimates else None)


def test_automatic_length_then_one_confirming_boot() -> None:
    engine = FakeEngine(3968, 16384)
    answer = find_max_model_len(engine, model_max=16384)
    assert (answer.max_model_len, answer.source, answer.confirmed) == (3968, "auto-fit", True)
    assert engine.asked == [AUTO, 3968]
    assert answer.kv_cache_tokens == 3968 and answer.max_concurrency == 1.0


def test_whole_model_fits_reports_headroom() -> None:
    engine = FakeEngine(1_048_576, 16384)
    answer = find_max_model_len(engine, model_max=16384)
    assert (answer.max_model_len, answer.confirmed) == (16384, True)
    assert answer.max_concurrency == 64.0
    assert engine.asked == [AUTO, 16384]


def test_without_automatic_length_the_error_estimate_answers() -> None:
    engine = FakeEngine(3968, 16384, auto=False)
    answer = find_max_model_len(engine, model_max=16384)
    assert (answer.max_model_len, answer.source, answer.confirmed) == (3968, "estimate", True)
    assert engine.asked == [AUTO, 16384, 3968]


def test_concurrency_line_jumps_to_the_capacity() -> None:
    engine = FakeEngine(3968, 100_000)
    answer = find_max_model_len(engine, model_max=100_000, start=1000)
    # 3968/1000 printed as 3.97x: 3970 does not fit, and the error's estimate gives 3968
    assert engine.asked == [1000, 3970, 3968]
    assert (answer.max_model_len, answer.confirmed) == (3968, True)


@pytest.mark.parametrize("capacity", [100, 3968, 12_345])
def test_bisection_where_the_engine_says_nothing(capacity: int) -> None:
    engine = FakeEngine(capacity, 16384, auto=False, estimates=False)
    engine._ok = lambda length, requested: ProbeBoot(requested=requested, outcome="ok", ran_at=length)  # type: ignore[method-assign]
    answer = find_max_model_len(engine, model_max=16384, tolerance=64, max_boots=30)
    assert answer.max_model_len is not None and answer.confirmed
    assert capacity - 64 <= answer.max_model_len <= capacity
    assert all(b.why == "bisection" for b in answer.boots[2:])


def test_a_failure_no_length_cures_is_no_answer() -> None:
    def boot(length: int) -> ProbeBoot:
        return ProbeBoot(requested=length, outcome="crashed", detail="server exited with code 1")

    answer = find_max_model_len(boot, model_max=4096)
    assert answer.max_model_len is None
    assert "failed as crashed" in answer.reason and len(answer.boots) == 2


def test_boot_budget_is_kept() -> None:
    engine = FakeEngine(3000, 1 << 20, auto=False, estimates=False)
    answer = find_max_model_len(engine, model_max=1 << 20, tolerance=1, max_boots=4)
    assert len(engine.asked) == 4
    assert answer.max_model_len is None or answer.max_model_len <= 3000


def test_model_max_from_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    assert model_max_len(str(tmp_path)) == 40960
    assert model_max_len(str(tmp_path / "missing")) is None


def test_automatic_length_is_read_from_the_auto_fit_line() -> None:
    # vLLM 0.32 CPU, --max-model-len -1 --kv-cache-memory-bytes 4M: "Using max model len 16384" first,
    # then "Auto-fit max_model_len: reduced from 16384 to 3968 ..."
    facts = parse_boot_facts(_log("vllm032-cpu-auto-fit.log"))
    b = probe_boot(AUTO, StartResult(outcome=Outcome.ok, boot_facts=facts))
    assert (b.ran_at, b.kv_cache_tokens, b.max_concurrency_tokens) == (3968, 4096, 3968)


def test_bisection_to_one_token_finds_the_exact_capacity() -> None:
    engine = FakeEngine(3979, 16384, auto=False, estimates=False)
    engine._ok = lambda length, requested: ProbeBoot(requested=requested, outcome="ok", ran_at=length)  # type: ignore[method-assign]
    answer = find_max_model_len(engine, model_max=16384, tolerance=1, max_boots=40)
    assert answer.max_model_len == 3979 and answer.confirmed
    assert len(set(engine.asked)) == len(engine.asked)  # no length booted twice
