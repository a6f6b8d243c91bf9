"""The stand-in engine itself: it must look like vLLM to servetune's boot-log parser and applied
check, serve what a Run needs, and its committed study must be a valid study."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.config import Config
from servetune.engine.vllm import VllmEngine
from servetune.load.bench import run_scenario
from servetune.load.scenario import Scenario
from servetune.study import load_study
from tests.fakes.standin import REPO, STANDIN

pytestmark = pytest.mark.concurrent  # a stand-in's boot log and one small run: nothing timed


def test_standin_boot_log_parses_and_every_flag_is_applied(tmp_path: Path) -> None:
    engine = VllmEngine(["python", str(STANDIN)], model="standin-model", startup_timeout_s=10, log_dir=tmp_path)
    config = Config.of({"max-model-len": 1024, "max-num-batched-tokens": 512, "kv-cache-memory-bytes": "1GiB",
                        "max-num-seqs": 4, "enable-prefix-caching": False, "compilation-config": {"mode": 3},
                        "fault": "none"})
    started = engine.start(config)
    assert started.ok and started.server is not None, started.log_tail
    try:
        facts = started.boot_facts
        assert facts.engine_version == "0.32.0" and facts.kv_cache_device == "CPU"
        assert facts.kv_cache_tokens == 2**30 // 1024 and facts.max_concurrency == facts.kv_cache_tokens / 1024
        assert facts.max_model_len == 1024 and facts.max_num_batched_tokens == 512
        assert facts.non_default_args["max_num_seqs"] == 4 and facts.non_default_args["enable_prefix_caching"] is False
        assert started.mismatches == []
        for endpoint in ("completions", "chat"):
            result = run_scenario(started.server.url, None, Scenario(
                name=endpoint, input_len=16, output_len=8, concurrency=2, num_prompts=4, endpoint=endpoint))
            assert result.outcome == "ok" and result.error is None
            assert result.summary["completed"] == 4 and result.summary["total_output_tokens"] == 32
            assert result.server_stats["requests_succeeded"] == 4
    finally:
        report = engine.stop(started.server)
    assert report.clean and not report.forced


def test_standin_study_file_is_valid() -> None:
    spec = load_study(REPO / "tests" / "faults" / "standin-study.yaml")
    assert "crash-at-boot" in spec.space["fault"].values
