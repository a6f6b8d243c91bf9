"""The engine layer against a real vLLM (CPU build, tiny dummy-weight model).

Each boot costs about a minute on two cores, so one server covers launch, BootFacts, a streamed
completion, the applied check of flags the CPU build overrides and of environment knobs (one
misspelled, one this vLLM no longer reads, two it honours), and teardown.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import psutil
import pytest

from servetune.engine.config import Config
from servetune.engine.knobs import KnobStatus
from servetune.engine.launch import group_members
from servetune.engine.ports import port_is_free
from servetune.vocabulary import Outcome
from tests.conftest import VllmTestServer, tiny_config, tiny_engine

pytestmark = pytest.mark.vllm
KNOBS = {"VLLM_CPU_KVCACHE_SPCE": "3", "VLLM_ATTENTION_BACKEND": "TORCH_SDPA", "VLLM_CPU_KVCACHE_SPACE": "2"}


def stream_completion(url: str, model: str, max_tokens: int = 8) -> list[dict]:
    body = json.dumps({"model": model, "prompt": "t1 t2 t3 t4", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    chunks, done = [], False
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    assert done, "stream did not end with [DONE]"
    # A server whose engine dies mid-request still ends the stream: with an error chunk.
    errors = [c["error"] for c in chunks if "error" in c]
    assert not errors, errors
    return chunks


@pytest.mark.concurrent  # boots and a few tokens: nothing timed
def test_launch_facts_completion_overrides_and_teardown(tmp_path: Path) -> None:
    engine = tiny_engine(tmp_path)
    # Both flags are accepted by the CPU build's CLI and then overridden by its platform code.
    # enforce-eager left out (None): it would set the compilation mode itself.
    config = tiny_config(async_scheduling=True, compilation_config={"mode": 3}, max_num_batched_tokens=1024,
                         enforce_eager=None)
    # Knobs beyond flags: a misspelled variable, one vLLM 0.32 no longer reads (the attention
    # backend, a flag since), and one it honours (2 GiB of KV cache, against the flag's 1 GiB).
    config = config.merged(Config.of(env=KNOBS))
    result = engine.start(config, tmp_path / "server.log")
    assert result.outcome is Outcome.ok, f"{result.detail}\n{result.log_tail}"
    server = result.server
    assert server is not None
    try:
        facts = result.boot_facts
        assert facts.engine_version and facts.engine_version.startswith("0.")
        assert facts.kv_cache_device == "CPU" and facts.kv_cache_tokens and facts.kv_cache_tokens > 0
        assert facts.max_concurrency_tokens == 2048 and facts.max_concurrency and facts.max_concurrency > 0
        assert facts.max_num_batched_tokens == 1024 and facts.max_model_len == 2048
        assert facts.startup_seconds and facts.startup_seconds > 0
        assert facts.non_default_args["async_scheduling"] is True

        chunks = stream_completion(server.url, engine.served_model_name(config))
        text = "".join(c["choices"][0]["text"] for c in chunks)
        assert len(chunks) >= 2 and text.strip()

        overridden = {m.flag: m for m in result.mismatches}
        assert overridden["async-scheduling"].applied is False
        assert "CPU KV cache size" in (overridden["async-scheduling"].evidence_line or "")
        assert "DYNAMO_TRACE_ONCE" in str(overridden["compilation-config.mode"].applied)
        assert set(overridden) == {"async-scheduling", "compilation-config.mode"}

        knobs = {k.knob: k for k in result.knobs}
        assert {k: v.status for k, v in knobs.items()} == {
            "env.VLLM_CPU_KVCACHE_SPCE": KnobStatus.not_applied,
            "env.VLLM_ATTENTION_BACKEND": KnobStatus.not_applied,
            "env.VLLM_CPU_KVCACHE_SPACE": KnobStatus.applied,
            "env.VLLM_SERVER_DEV_MODE": KnobStatus.applied,  # the value the server resolved (the plug-in)
        }, [k.describe() for k in result.knobs]
        assert "Unknown vLLM environment variable detected" in (knobs["env.VLLM_ATTENTION_BACKEND"].evidence_line or "")
        assert "Explicitly set (2.0/" in (knobs["env.VLLM_CPU_KVCACHE_SPACE"].evidence_line or "")
        assert facts.resolved_env["VLLM_CPU_KVCACHE_SPCE"] is None and facts.resolved_env["VLLM_SERVER_DEV_MODE"]

        tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        assert len(tree) >= 2  # API server + engine core (+ workers)
    finally:
        report = engine.stop(server)
    assert report.clean, report
    assert group_members(server.pgid) == []
    assert not any(p.is_running() for p in tree)  # is_running also compares creation time
    assert port_is_free(server.port)


@pytest.mark.concurrent  # boots and a few tokens: nothing timed
def test_unknown_flag_is_invalid_arg(tmp_path: Path) -> None:
    result = tiny_engine(tmp_path).start(tiny_config(no_such_flag_xyz=1), tmp_path / "bad.log")
    assert result.outcome is Outcome.invalid_arg and result.server is None
    assert any("unrecognized arguments: --no-such-flag-xyz" in line for line in result.evidence)


def test_shared_server_has_dev_mode_and_serves_the_model(vllm_server: VllmTestServer) -> None:
    req = urllib.request.Request(vllm_server.url + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    assert len(stream_completion(vllm_server.url, vllm_server.model, max_tokens=2)) >= 2  # a chunk a token
    if vllm_server.server is not None:  # started by the fixture (not SERVETUNE_TEST_VLLM_URL)
        assert vllm_server.boot_facts.kv_cache_tokens == 1 << 20  # 1 GiB / 1 KiB per token
