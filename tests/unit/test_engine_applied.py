"""Applied-vs-requested check on logs of real vLLM runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.applied import check_applied, same_value
from servetune.engine.bootfacts import parse_boot_facts
from servetune.engine.config import Config

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def facts(name: str):
    return parse_boot_facts((LOGS / name).read_text(errors="replace"))


def by_flag(mismatches):
    out: dict[str, list] = {}
    for m in mismatches:
        out.setdefault(m.flag, []).append(m)
    return out


def test_gpu_flags_that_took_effect_give_no_mismatch() -> None:
    # exactly what the moe-mbt16k-noasync run asked for
    config = Config.of({"load-format": "dummy", "max-num-batched-tokens": 16384, "async-scheduling": False})
    assert check_applied(config, facts("vllm026-gpu-moe-mbt16k-noasync.log")) == []


def test_gpu_async_line_contradicts_request() -> None:
    # the default q8b run resolved async scheduling on; a config asking for it off is contradicted
    f = facts("vllm026-gpu-q8b-default-boot.txt")
    found = by_flag(check_applied(Config.of({"async-scheduling": False}), f))
    reasons = [m.reason for m in found["async-scheduling"]]
    assert any(r.startswith("overridden") for r in reasons)  # the "Asynchronous scheduling is enabled" line
    assert any("absent" in r for r in reasons)  # and never parsed as non-default
    over = next(m for m in found["async-scheduling"] if m.reason.startswith("overridden"))
    assert over.applied is True and "Asynchronous scheduling is enabled" in (over.evidence_line or "")


def test_cpu_forces_async_scheduling_off() -> None:
    f = facts("vllm032-cpu-async-mbt1024.log")
    config = Config.of({"load-format": "dummy", "kv-cache-memory-bytes": "1G", "max-model-len": 2048,
                        "max-num-batched-tokens": 1024, "async-scheduling": True})
    found = check_applied(config, f)
    assert [(m.flag, m.requested, m.applied) for m in found] == [("async-scheduling", True, False)]
    assert "CPU KV cache size" in (found[0].evidence_line or "")


def test_cpu_compilation_overrides_from_engine_config_line() -> None:
    f = facts("vllm032-cpu-async-mbt1024.log")
    found = by_flag(check_applied(Config.of({"compilation-config": {"mode": 3, "backend": "inductor"}}), f))
    assert [m.applied for m in found["compilation-config.mode"]] == ["<CompilationMode.DYNAMO_TRACE_ONCE: 2>"]
    assert "compilation-config.backend" not in found  # inductor is what it shows


def test_parsed_request_matches_but_platform_overrides_compile_mode() -> None:
    # non-default args show mode VLLM_COMPILE (3) as asked; the engine config line shows what ran.
    f = facts("vllm032-cpu-async-compile-mode3.log")
    config = Config.of({"load-format": "dummy", "kv-cache-memory-bytes": "1G", "max-model-len": 2048,
                        "max-num-batched-tokens": 1024, "async-scheduling": True,
                        "compilation-config": {"mode": 3}, "served-model-name": "x"})
    found = check_applied(config, f)
    assert [(m.flag, m.reason.split(":")[0]) for m in found] == [
        ("async-scheduling", "overridden"), ("compilation-config.mode", "overridden")]


def test_max_model_len_resolved_differently() -> None:
    f = facts("vllm032-cpu-async-mbt1024.log")
    found = by_flag(check_applied(Config.of({"max-model-len": 4096}), f))
    assert {m.applied for m in found["max-model-len"]} == {2048}


def test_engine_config_bool_contradiction() -> None:
    f = facts("vllm026-gpu-moe-mbt16k-noasync.log")
    found = by_flag(check_applied(Config.of({"enable-prefix-caching": False}), f))
    assert "True" in [m.applied for m in found["enable-prefix-caching"]]


def test_launcher_flags_are_not_checked() -> None:
    f = facts("vllm032-cpu-async-mbt1024.log")
    assert check_applied(Config.of({"port": 1, "served-model-name": "x", "max-num-batched-tokens": None}), f) == []


@pytest.mark.parametrize(("requested", "applied", "same"), [
    ("1G", 1 << 30, True), ("1g", 10**9, True), ("16k", 16000, True), (2048, "2048", True),
    (True, "True", True), (False, True, False), ("bfloat16", "torch.bfloat16", True),
    ([1, 2, 4], "[]", False), ([1, 2], [1, 2], True), ("FULL", "<CUDAGraphMode.NONE: 0>", False),
    (0, "<CUDAGraphMode.NONE: 0>", True),
    ({"mode": 3}, "CompilationConfig(mode=3, backend='inductor')", True),
    ({"mode": 3}, "CompilationConfig(mode=<CompilationMode.NONE: 0>, backend='')", False),
    ({"mode": 3}, "{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'x': None}", True),
    ({"mode": 3}, "{'mode': <CompilationMode.NONE: 0>, 'x': None}", False), ({"a": 1}, {"a": 1, "b": 2}, True), ({"a": 1}, {"a": 2}, False),
])
def test_same_value(requested: object, applied: object, same: bool) -> None:
    assert same_value(requested, applied) is same


def test_json_text_from_a_study_space_is_compared_as_json() -> None:
    # H200 study trial: the space held the compilation config as JSON text (spaces hold scalars);
    # vLLM applied PIECEWISE, so nothing must be reported, while FULL would have been overridden.
    boot = facts("vllm026-h200-piecewise.log")
    asked = Config.of({"load-format": "dummy", "compilation-config": '{"cudagraph_mode": "PIECEWISE"}'})
    assert check_applied(asked, boot) == []
    other = Config.of({"load-format": "dummy", "compilation-config": '{"cudagraph_mode": "FULL"}'})
    assert [m.flag for m in check_applied(other, boot)][:1] == ["compilation-config"]


def test_secret_flags_are_not_checked_they_reach_the_server_as_variables() -> None:
    """`api-key`/`hf-token` go to VLLM_API_KEY/HF_TOKEN, so vLLM's non-default args never show them."""
    config = Config.of({"load-format": "dummy", "max-num-batched-tokens": 16384, "async-scheduling": False,
                        "api-key": "sk-1234", "hf-token": "hf_1234"})
    assert check_applied(config, facts("vllm026-gpu-moe-mbt16k-noasync.log")) == []
