"""Constraints between parameters: parsed without eval, applied to whole Configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from servetune.engine.config import Config
from servetune.errors import ServetuneError
from servetune.study import Constraint, parse_study
from servetune.study.constraints import parse

TEXT = (Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml").read_text()


def _with_constraints(block: str) -> str:
    return TEXT + "constraints:\n" + block


def test_parse_operands_and_ops() -> None:
    p = parse("max_num_batched_tokens>=max-model-len")
    assert (p.left.name, p.op, p.right.name) == ("max-num-batched-tokens", ">=", "max-model-len")
    p = parse("max-num-seqs < 64")
    assert (p.left.name, p.op, p.right.number) == ("max-num-seqs", "<", 64)
    assert parse("env.VLLM_X != 0.5").right.number == 0.5
    assert parse("env.VLLM_X != 0.5").left.name == "env.VLLM_X"


@pytest.mark.parametrize(
    "expr", ["max-num-seqs", "a >= ", "__import__('os').system('true') == 1", "a >= b >= c", "1 < 2", "a => b", "a >= b or True"]
)
def test_unparseable_expressions_are_refused(expr: str) -> None:
    with pytest.raises(ValidationError, match="cannot parse|compares two numbers"):
        Constraint.model_validate(expr)


@pytest.mark.parametrize(
    ("expr", "flags", "ok"),
    [
        ("a >= b", {"a": 4, "b": 4}, True),
        ("a > b", {"a": 4, "b": 4}, False),
        ("a <= 8", {"a": 9}, False),
        ("a < 8", {"a": 7}, True),
        ("a == b", {"a": "x", "b": "x"}, True),
        ("a != b", {"a": True, "b": True}, False),
        ("a >= b", {"a": 4}, True),  # b unset: the engine's default is unknown here, not a breach
        ("a >= b", {"a": "2GiB", "b": 4}, False),  # uncomparable values never pass an order check
    ],
)
def test_violation(expr: str, flags: dict[str, object], ok: bool) -> None:
    c = Constraint.model_validate(expr)
    assert (c.violation(Config.of(flags=flags)) is None) is ok


def test_when_limits_where_a_rule_applies() -> None:
    c = Constraint.model_validate({"expr": "max-num-batched-tokens >= max-model-len", "when": {"enable_chunked_prefill": False}})
    small = {"max-num-batched-tokens": 256, "max-model-len": 2048}
    assert c.violation(Config.of(flags={**small, "enable-chunked-prefill": True})) is None
    assert c.violation(Config.of(flags=small)) is None  # unset matches only null
    message = c.violation(Config.of(flags={**small, "enable-chunked-prefill": False}))
    assert message is not None and "max-num-batched-tokens >= max-model-len" in message and "256" in message


def test_env_operands_read_numbers() -> None:
    c = Constraint.model_validate("env.VLLM_CPU_KVCACHE_SPACE >= 2")
    assert c.violation(Config.of(env={"VLLM_CPU_KVCACHE_SPACE": "4"})) is None
    assert c.violation(Config.of(env={"VLLM_CPU_KVCACHE_SPACE": "1"})) is not None


def test_study_checks_constraints_against_every_config() -> None:
    spec = parse_study(
        _with_constraints("  - max-num-batched-tokens >= max-model-len\n  - {expr: max-num-seqs <= 8, when: {enable-prefix-caching: true}}\n")
    )
    ok = spec.config_for({"max-num-batched-tokens": 4096})
    assert spec.constraint_violations(ok) == []
    bad = spec.config_for({"max-num-batched-tokens": 1024, "max-num-seqs": 32, "enable-prefix-caching": True})
    assert len(spec.constraint_violations(bad)) == 2


def test_unknown_name_is_a_load_error_with_line() -> None:
    text = _with_constraints("  - max-num-batched-tokens >= max-model-lenn\n")
    with pytest.raises(ServetuneError) as info:
        parse_study(text, "study.yaml")
    line = len(text.splitlines())
    assert f"study.yaml:{line}: constraints[0]: 'max-model-lenn' is neither" in str(info.value)
    assert "did you mean 'max-model-len'?" in str(info.value)


def test_ordering_a_non_number_is_a_load_error() -> None:
    with pytest.raises(ServetuneError, match="orders 'kv-cache-memory-bytes', which can be the non-number '2GiB'"):
        parse_study(_with_constraints("  - kv-cache-memory-bytes > 100\n"))
    # equality works on any value
    spec = parse_study(_with_constraints("  - kv-cache-memory-bytes != load-format\n"))
    assert spec.constraint_violations(spec.baseline_config()) == []


KV_DTYPES = TEXT.replace("space:\n", "space:\n  kv-cache-dtype: [auto, fp8_e5m2, fp8_e4m3]\n")


@pytest.mark.parametrize("expr", ["kv-cache-dtype != fp8_e5m2", "kv-cache-dtype != 'fp8_e5m2'",
                                  "'fp8_e5m2' != kv-cache-dtype", 'kv-cache-dtype != "fp8_e5m2"'])
def test_a_constraint_excludes_a_string_value(expr: str) -> None:
    spec = parse_study(KV_DTYPES + f"constraints:\n  - {json.dumps(expr)}\n")
    parsed = spec.constraints[0].parsed  # a bare word is kept as the string it spells
    assert {parsed.left.text, parsed.right.text} == {"fp8_e5m2", None}
    assert spec.constraint_violations(spec.config_for({"kv-cache-dtype": "fp8_e4m3"})) == []
    (why,) = spec.constraint_violations(spec.config_for({"kv-cache-dtype": "fp8_e5m2"}))
    assert "kv-cache-dtype" in why and "fp8_e5m2" in why


def test_a_string_constraint_removes_grid_candidates() -> None:
    from servetune.search.grid import Grid

    spec = parse_study(KV_DTYPES.replace("strategy: ofat", "strategy: grid")
                       + "constraints:\n  - kv-cache-dtype != fp8_e5m2\n")
    combos = list(Grid(spec).combinations())
    allowed = [c for c in combos if not spec.constraint_violations(spec.config_for(c))]
    assert len(allowed) == len(combos) * 2 // 3
    assert all(c.get("kv-cache-dtype") != "fp8_e5m2" for c in allowed)


def test_a_string_that_is_none_of_the_values_is_a_load_error() -> None:
    with pytest.raises(ServetuneError, match="'fp8_e5m3' is none of 'kv-cache-dtype'"):
        parse_study(KV_DTYPES + "constraints:\n  - kv-cache-dtype != fp8_e5m3\n")


def test_ordering_a_string_is_refused() -> None:
    with pytest.raises(ValidationError, match="orders a string"):
        Constraint.model_validate("kv-cache-dtype > 'fp8'")


def test_a_typo_of_a_name_in_an_equality_stays_a_name_error() -> None:
    with pytest.raises(ServetuneError, match="'max-num-seq' is neither.*did you mean 'max-num-seqs'"):
        parse_study(KV_DTYPES + "constraints:\n  - max-num-batched-tokens != max-num-seq\n")
