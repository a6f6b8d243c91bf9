"""The memory probe's verdict from /metrics evidence and the boot log (real CPU fixture)."""

from __future__ import annotations

import math
from pathlib import Path

from servetune.engine.bootfacts import parse_boot_facts
from servetune.engine.config import Config
from servetune.probe.memory import HEADROOM, judge, pool_size_bytes, scenario_need

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
# "Explicitly set (1.0/14.09) GiB for KV cache", "CPU KV cache size: 1,048,576 tokens": 1 KiB a token
FACTS = parse_boot_facts((LOGS / "vllm032-cpu-async-mbt1024.log").read_text(errors="replace"))
POOL = 1_048_576
SUMMARY = {"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32}


def stats(preemptions: float, kv: float, running: float = 8, waiting: float = 0) -> dict[str, float]:
    return {"preemptions": preemptions, "peak_kv_cache_usage": kv, "peak_running": running, "peak_waiting": waiting}


def test_roomy_pool_goes_down_to_the_measured_peak_plus_headroom() -> None:
    need = scenario_need("burst", stats(0, 0.02), SUMMARY, POOL, None)
    assert need.needed_tokens == math.ceil(0.02 * POOL)
    v = judge([need], FACTS, Config.of({"kv-cache-memory-bytes": "1GiB"}))
    assert v.direction == "down"
    assert v.bytes_per_token == 1024
    wanted = need.needed_tokens * (1 + HEADROOM) * 1024
    assert v.smallest_kv_cache_bytes == math.ceil(wanted / 2**20) * 2**20  # 23 MiB
    assert "can go down" in v.text and str(v.smallest_kv_cache_bytes) in v.text


def test_preemptions_go_up_to_what_the_held_requests_want() -> None:
    small = parse_boot_facts("INFO 12-01 05:00:00 [kv_cache_utils.py:2327] CPU KV cache size: 4,096 tokens, "
                             "Maximum concurrency for 2,048 tokens per request: 2.00x\n")
    need = scenario_need("burst", stats(12, 1.0, running=3, waiting=5), SUMMARY, 4096, max_num_seqs=32)
    assert need.needed_tokens == 8 * 544  # 8 requests held at once x (512 + 32) tokens
    v = judge([need], small, Config.of({"kv-cache-memory-bytes": "4MiB"}))
    assert v.direction == "up" and "preemptions in burst" in v.text
    assert v.smallest_kv_cache_bytes is not None and v.smallest_kv_cache_bytes > 4 * 2**20


def test_max_num_seqs_caps_the_requests_that_hold_kv() -> None:
    need = scenario_need("burst", stats(3, 1.0, running=4, waiting=12), SUMMARY, 4096, max_num_seqs=4)
    assert need.needed_tokens == 4 * 544


def test_tight_without_preemptions_goes_up_and_middle_stays() -> None:
    config = Config.of({"kv-cache-memory-bytes": "1GiB"})
    assert judge([scenario_need("a", stats(0, 0.95), SUMMARY, POOL, None)], FACTS, config).direction == "up"
    assert judge([scenario_need("a", stats(0, 0.75), SUMMARY, POOL, None)], FACTS, config).direction == "stay"
    # the worst scenario decides
    mixed = [scenario_need("a", stats(0, 0.1), SUMMARY, POOL, None),
             scenario_need("b", stats(0, 0.7), SUMMARY, POOL, None)]
    assert judge(mixed, FACTS, config).direction == "stay"


def test_no_metrics_no_advice() -> None:
    v = judge([scenario_need("a", {"samples": 0}, SUMMARY, POOL, None)], FACTS, Config())
    assert v.direction == "unknown" and v.smallest_kv_cache_bytes is None


def test_gpu_memory_utilization_from_the_device_memory() -> None:
    # 1 GiB pool now at 0.9 of an 80 GiB device; the load needs half of it
    need = scenario_need("a", stats(0, 0.5), SUMMARY, POOL, None)
    v = judge([need], FACTS, Config.of({"gpu-memory-utilization": 0.9}), device_memory_gib=80)
    assert v.smallest_kv_cache_bytes is not None
    expected = 0.9 + (v.smallest_kv_cache_bytes - 2**30) / (80 * 2**30)
    assert v.gpu_memory_utilization == round(expected, 3) and v.gpu_memory_utilization < 0.9


def test_pool_size_prefers_the_exact_flag_over_the_logs_two_decimals() -> None:
    tiny = parse_boot_facts("(Worker pid=1) INFO 12-01 05:00:00 [cpu_worker.py:260] Explicitly set (0.0/15.84) GiB "
                            "for KV cache on node 0.\n")
    assert pool_size_bytes(tiny, Config.of({"kv-cache-memory-bytes": "4MiB"})) == 4 * 2**20
    assert pool_size_bytes(FACTS, Config.of({"kv-cache-memory-bytes": "4M"})) == 4 * 2**20
    assert pool_size_bytes(FACTS, Config()) == 2**30


def test_the_smallest_pool_still_holds_one_request_of_max_model_len() -> None:
    # 0.1 % of the pool is 1,049 tokens, but vLLM will not boot a pool under max-model-len 2048
    v = judge([scenario_need("a", stats(0, 0.001), SUMMARY, POOL, None)], FACTS, Config())
    assert v.needed_tokens == 2048 == FACTS.max_model_len
    assert v.smallest_kv_cache_bytes == math.ceil(2048 * (1 + HEADROOM) * 1024 / 2**20) * 2**20
    assert "one request of max-model-len" in v.text


def test_the_scenarios_clients_cap_the_requests_held() -> None:
    # peaks of running (6) and waiting (3) sampled at different moments; 8 clients can hold 8 at most
    need = scenario_need("burst", stats(3, 1.0, running=6, waiting=3), SUMMARY, 4096, None, clients=8)
    assert need.needed_tokens == 8 * 544
