"""`servetune probe context` and `probe memory` end to end against the stand-in engine, which
prints vLLM 0.32's boot lines (its automatic max-model-len, the too-long error with its estimate)
and keeps a KV pool of --kv-cache-memory-bytes / 1 KiB tokens in its /metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servetune.probe.context import AUTO
from tests.fakes.standin import STANDIN, study_text
from tests.unit.cli_run import servetune

COMMAND = f"{sys.executable} {STANDIN}"
POOL_4MIB = str(4 * 2**20)  # 4,096 tokens, of which 3,968 fit one request (one null block held back)


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 16384}))
    return model


def test_context_from_the_automatic_length(tmp_path: Path) -> None:
    out = tmp_path / "answer.json"
    r = servetune("probe", "context", "--model", _model(tmp_path), "--command", COMMAND, "--log-dir",
                  tmp_path / "logs", "--out", out, "--", "--kv-cache-memory-bytes", POOL_4MIB)
    assert r.code == 0, r.stdout + r.stderr
    answer = json.loads(out.read_text())
    assert [b["requested"] for b in answer["boots"]] == [AUTO, 3968]
    assert (answer["max_model_len"], answer["source"], answer["confirmed"]) == (3968, "auto-fit", True)
    assert "max-model-len 3968 fits" in r.stdout and "KV cache 4,096 tokens" in r.stdout


def test_context_from_the_errors_estimate(tmp_path: Path) -> None:
    out = tmp_path / "answer.json"
    r = servetune("probe", "context", "--model", _model(tmp_path), "--command", COMMAND, "--start", "16000",
                  "--log-dir", tmp_path / "logs", "--out", out, "--", "--kv-cache-memory-bytes", POOL_4MIB)
    assert r.code == 0, r.stdout + r.stderr
    answer = json.loads(out.read_text())
    assert [(b["requested"], b["outcome"]) for b in answer["boots"]] == [(16000, "context_too_long"), (3968, "ok")]
    assert answer["source"] == "estimate" and answer["max_model_len"] == 3968


def test_context_refuses_a_max_model_len_among_the_flags(tmp_path: Path) -> None:
    r = servetune("probe", "context", "--model", _model(tmp_path), "--command", COMMAND, "--log-dir",
                  tmp_path / "logs", "--", "--max-model-len", "4096")
    assert r.code == 2 and r.error_lines == ["error: probe context sets --max-model-len itself; leave it out of "
                                             "the engine flags"]


def _memory(tmp_path: Path, kv_bytes: int, concurrency: int) -> tuple[int, dict, str]:
    scenario = {"name": "burst", "input_len": 16, "output_len": 8, "concurrency": concurrency,
                "num_prompts": 4 * concurrency, "warmups": 0}
    study = tmp_path / "study.yaml"
    study.write_text(study_text("mem", args={"kv-cache-memory-bytes": kv_bytes, "max-model-len": 32},
                                scenarios=[scenario]))
    out = tmp_path / "probe"
    r = servetune("probe", "memory", study, "--out", out)
    verdict = json.loads((out / "memory.json").read_text()) if (out / "memory.json").exists() else {}
    return r.code, verdict, r.stdout + r.stderr


def test_memory_roomy_pool_goes_down(tmp_path: Path) -> None:
    code, verdict, text = _memory(tmp_path, 4 * 2**20, 2)
    assert code == 0, text
    assert verdict["direction"] == "down"
    need = verdict["scenarios"][0]
    assert need["preemptions"] == 0 and 0 < need["kv_usage_peak"] < 0.6
    assert verdict["smallest_kv_cache_bytes"] < 4 * 2**20
    assert "memory: the KV cache memory can go down" in text


def test_memory_preempting_pool_goes_up(tmp_path: Path) -> None:
    # 168 tokens; 8 requests of 16 + 8 tokens at once want 192
    code, verdict, text = _memory(tmp_path, (128 + 40) * 1024, 8)
    assert code == 0, text
    assert verdict["direction"] == "up"
    assert verdict["scenarios"][0]["preemptions"] > 0
    assert verdict["smallest_kv_cache_bytes"] > (128 + 40) * 1024
    assert "preemptions in burst" in text


def test_memory_needs_a_study_or_a_model_and_a_scenario(tmp_path: Path) -> None:
    r = servetune("probe", "memory", "--model", tmp_path, "--out", tmp_path / "probe")
    assert r.code == 2 and r.error_lines == ["error: give a study file, or --model DIR and at least one --scenario"]


def test_context_checks_out_before_any_boot(tmp_path: Path) -> None:
    r = servetune("probe", "context", "--model", _model(tmp_path), "--command", COMMAND, "--log-dir",
                  tmp_path / "logs", "--out", tmp_path, "--", "--kv-cache-memory-bytes", POOL_4MIB)
    assert r.code == 2 and r.error_lines == [f"error: --out {tmp_path}: is a directory, expected a file name"]
    assert not list((tmp_path / "logs").glob("*.log"))  # nothing booted
