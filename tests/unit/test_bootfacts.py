"""BootFacts parsing on logs captured from real vLLM runs (tests/fixtures/logs/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.bootfacts import parse_boot_facts, split_engine_config

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def facts(name: str):
    return parse_boot_facts((LOGS / name).read_text(errors="replace"))


def test_vllm026_gpu_default_two_line_kv_form() -> None:
    f = facts("vllm026-gpu-q8b-default-boot.txt")
    assert f.engine_version == "0.26.0"
    assert f.non_default_args == {
        "host": "127.0.0.1", "model": "/tmp/gpukit/models/qwen3-8b",
        "served_model_name": ["qwen3-8b"], "load_format": "dummy",
    }
    assert (f.kv_cache_device, f.kv_cache_tokens) == ("GPU", 814_368)
    assert (f.max_concurrency, f.max_concurrency_tokens) == (19.88, 40_960)
    assert f.kv_cache_memory_gib == 111.84
    assert (f.model_load_gib, f.model_load_seconds) == (15.27, 1.982453)
    assert f.torch_compile_seconds == 25.89
    assert (f.cuda_graph_seconds, f.cuda_graph_gib) == (7.0, 1.0)
    assert f.engine_init_seconds == 50.16
    assert f.async_scheduling is True
    assert f.attention_backend == "FLASH_ATTN"
    assert f.max_num_batched_tokens == 8192
    assert f.max_model_len == 40960
    assert "Asynchronous scheduling is enabled" in f.evidence["async_scheduling"]


def test_vllm026_gpu_moe_no_async_full_server_log() -> None:
    f = facts("vllm026-gpu-moe-mbt16k-noasync.log")
    assert f.non_default_args["max_num_batched_tokens"] == 16384
    assert f.non_default_args["async_scheduling"] is False
    assert f.async_scheduling is False
    assert f.max_num_batched_tokens == 16384
    assert (f.model_load_gib, f.model_load_seconds) == (56.88, 0.685265)  # "GiB memory and" form
    assert f.kv_cache_tokens == 738_864
    assert f.engine_config["enable_prefix_caching"] == "True"
    assert f.engine_config["dtype"] == "torch.bfloat16"
    assert f.default_moe_config is False  # this run found a tuned config for the H200
    assert f.moe_config_file is not None and f.moe_config_file.endswith("/E=128,N=768,device_name=NVIDIA_H200.json")
    assert f.moe_backend == "TritonExperts"
    assert f.sampler == "FlashInfer top-p/top-k sampling disabled via VLLM_USE_FLASHINFER_SAMPLER=0."
    # every distinct WARNING once, including ones after start-up
    assert any("Triton kernel JIT compilation during inference" in w for w in f.warnings)
    assert len(f.warnings) == len(set(f.warnings))


def test_vllm032_cpu_one_line_kv_form() -> None:
    f = facts("vllm032-cpu-async-mbt1024.log")
    assert f.engine_version == "0.32.0"
    assert f.non_default_args["kv_cache_memory_bytes"] == 1 << 30
    assert f.non_default_args["async_scheduling"] is True
    assert (f.kv_cache_device, f.kv_cache_tokens) == ("CPU", 1_048_576)
    assert (f.max_concurrency, f.max_concurrency_tokens) == (512.0, 2048)
    assert f.kv_cache_memory_gib == 1.0
    assert f.model_load_seconds == 0.42353
    assert f.engine_init_seconds == 81.53
    assert f.max_num_batched_tokens == 1024
    assert f.max_model_len == 2048
    assert f.async_scheduling is None  # 0.32 no longer logs the resolved value
    assert f.cuda_graph_seconds is None and f.torch_compile_seconds is None
    assert f.compilation_config["cudagraph_capture_sizes"] == "[]"
    assert f.compilation_config["mode"] == "<CompilationMode.DYNAMO_TRACE_ONCE: 2>"
    # worker processes are named "VllmWorker-0": their warnings count too
    assert "Model Runner V2 requires Triton; using the V1 model runner instead." in f.warnings


def test_failed_start_gives_empty_facts_not_an_error() -> None:
    f = facts("vllm032-cpu-invalid-value.log")
    assert f.kv_cache_tokens is None and f.engine_version is None and f.non_default_args == {}


def test_notable_lines_default_moe_and_mamba_mode() -> None:
    # Message texts as vLLM logs them (fused_moe.py, models/config.py), in its line format.
    text = (
        "(EngineCore pid=9) WARNING 11-30 07:41:37 [fused_moe.py:1164] Using default MoE config. "
        "Performance might be sub-optimal! Config file not found at /x/E=128,N=768,device_name=NVIDIA_H200.json\n"
        "(APIServer pid=8) INFO 11-30 07:41:37 [config.py:688] Mamba cache mode is set to 'align' for "
        "Qwen3NextForCausalLM by default when prefix caching is enabled\n"
    )
    f = parse_boot_facts(text)
    assert f.default_moe_config is True
    assert f.mamba_cache_mode == "align"
    assert len(f.notable) == 2
    assert f.warnings == [f.notable[0]]


def test_non_literal_values_in_non_default_args_are_kept_as_text() -> None:
    f = parse_boot_facts("INFO 11-30 07:29:17 [api_utils.py:273] non-default args: "
                         "{'compilation_config': CompilationConfig(mode=3, backend='x'), 'async_scheduling': True}\n")
    assert f.non_default_args == {"compilation_config": "CompilationConfig(mode=3, backend='x')",
                                  "async_scheduling": True}


@pytest.mark.parametrize(("text", "expected"), [
    ("a=1, b='x, y', c={'k': [1, 2], 'j': 3}, d=torch.bfloat16",
     {"a": "1", "b": "x, y", "c": "{'k': [1, 2], 'j': 3}", "d": "torch.bfloat16"}),
    ("cfg=Foo(a=1, b=2), e=None", {"cfg": "Foo(a=1, b=2)", "e": "None"}),
])
def test_split_engine_config(text: str, expected: dict[str, str]) -> None:
    assert split_engine_config(text) == expected
