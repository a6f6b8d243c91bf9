"""`servetune probe context` and `probe memory` against a real vLLM (CPU build, tiny model).

A 4 MiB KV cache (4,096 tokens of the tiny model) keeps the context short of the model's own
16,384, so the oracle has something to find, and makes a burst of long requests preempt. The
context test's boot past the answer is also the engine layer's check that a max-model-len the
KV cache cannot hold is classified context_too_long, with vLLM's estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.engine.bootfacts import parse_boot_facts
from servetune.engine.config import Config, render_flags
from servetune.vocabulary import Outcome
from tests.conftest import EAGER, servetune, tiny_engine, tiny_model_dir

# Boots, KV-cache sizes and preemption counts: nothing timed, no core pinned.
pytestmark = [pytest.mark.vllm, pytest.mark.concurrent]

MEMORY = "4M"  # vLLM reads "4M" as 4 MiB
MARGIN = 256  # tokens beyond the answer: two of the CPU build's 128-token blocks


def test_context_oracle_answer_boots_and_a_margin_more_does_not(tmp_path: Path) -> None:
    out = tmp_path / "answer.json"
    done = servetune("probe", "context", "--model", str(tiny_model_dir()), "--log-dir", str(tmp_path / "probe"),
                     "--out", str(out), "--", "--load-format", "dummy", "--kv-cache-memory-bytes", MEMORY,
                     *render_flags(EAGER))
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(out.read_text())
    length = answer["max_model_len"]
    assert answer["confirmed"] and 0 < length < 16384
    assert answer["kv_cache_tokens"] >= length and answer["max_concurrency"] >= 1.0
    assert f"max-model-len {length} fits" in done.stdout

    # Checked apart from the probe's verdict: vLLM's own log of the confirming boot says it ran at
    # exactly the answer and came up, and the answer + a margin does not boot.
    (confirming,) = [b for b in answer["boots"] if b["requested"] == length and b["outcome"] == "ok"]
    log = Path(confirming["log_path"]).read_text()
    assert parse_boot_facts(log).max_model_len == length and "Application startup complete" in log
    engine = tiny_engine(tmp_path)
    flags = {"load-format": "dummy", "kv-cache-memory-bytes": MEMORY, **EAGER}
    over = engine.start(Config.of({**flags, "max-model-len": length + MARGIN}), tmp_path / "over.log")
    if over.server is not None:
        engine.stop(over.server)
    assert over.outcome is Outcome.context_too_long, over.detail
    assert over.estimated_max_model_len == length and str(length) in over.detail
    # What 4 MiB of KV cache can hold for this model: 2 (K and V) x layers x kv heads x head dim x 2 bytes.
    cfg = json.loads((tiny_model_dir() / "config.json").read_text())
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    assert length <= (4 << 20) // per_token


def test_memory_probe_advises_on_a_real_server(tmp_path: Path) -> None:
    # 8 clients of 512 + 256 tokens want 6,144 tokens of a 4,096-token pool: vLLM must preempt.
    study = tmp_path / "study.yaml"
    study.write_text(json.dumps({
        "name": "memory-probe",
        "engine": {"model": str(tiny_model_dir()),
                   "args": {"load-format": "dummy", "kv-cache-memory-bytes": MEMORY, "max-model-len": 1024, **EAGER},
                   "env": {"VLLM_SERVER_DEV_MODE": "1"}},
        "scenarios": [{"name": "burst", "input_len": 512, "output_len": 256, "concurrency": 8, "num_prompts": 16,
                       "warmups": 0}],
        "objective": {"maximize": "output_throughput"},
    }))
    out = tmp_path / "probe"
    done = servetune("probe", "memory", str(study), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "memory.json").read_text())
    burst = verdict["scenarios"][0]
    assert burst["kv_usage_peak"] is not None and burst["preemptions"] is not None  # read from the real /metrics
    assert verdict["direction"] == "up" and burst["preemptions"] > 0
    assert verdict["pool_bytes"] == 4 * 2**20
    assert verdict["smallest_kv_cache_bytes"] > 4 * 2**20
    assert "memory: raise the KV cache memory" in done.stdout
