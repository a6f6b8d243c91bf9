"""engine/served.py: the server a command launches with --serve, without booting vLLM (its start
and stop stand in), refused, failed and always stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servetune.engine import served as served_module
from servetune.engine.base import StartResult
from servetune.engine.bootfacts import BootFacts
from servetune.engine.sglang import SglangEngine
from servetune.engine.vllm import VllmEngine
from servetune.errors import NoResult, ServetuneError
from servetune.vocabulary import Outcome


class _Server:
    url = "http://127.0.0.1:1"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Each engine's start and stop recorded, with the engine's kind; the machine guard passes."""
    seen: dict[str, Any] = {"started": [], "stopped": [], "result": None, "kinds": []}

    def start(self: VllmEngine | SglangEngine, config: Any, log_path: Path, *args: Any, **kwargs: Any) -> StartResult:
        seen["started"].append((config.flags, log_path))
        seen["kinds"].append(self.profile.kind)
        return seen["result"]

    for engine in (VllmEngine, SglangEngine):
        monkeypatch.setattr(engine, "start", start)
        monkeypatch.setattr(engine, "stop", lambda self, server, *a, **k: seen["stopped"].append(server))
    monkeypatch.setattr(served_module, "checked_record", lambda *a, **k: None)
    return seen


def test_the_server_is_handed_over_and_stopped_even_when_the_command_fails(tmp_path: Path, calls: dict) -> None:
    server = _Server()
    calls["result"] = StartResult.model_construct(outcome=Outcome.ok, server=server,
                                                  boot_facts=BootFacts(kv_cache_tokens=4096))
    notes: list[str] = []
    with pytest.raises(RuntimeError, match="the command broke"):
        with served_module.served(tmp_path, {"max-num-seqs": 8}, tmp_path / "logs", "bench", "k", False,
                                  notes.append) as (url, key, kv_tokens):
            assert (url, key, kv_tokens) == ("http://127.0.0.1:1", "k", 4096)
            raise RuntimeError("the command broke")
    assert calls["stopped"] == [server]
    assert calls["started"][0][1] == tmp_path / "logs" / "bench.server.log"
    assert notes[0] == f"starting vLLM on {tmp_path} ..." and notes[1].startswith("server up at http://127.0.0.1:1")


def test_the_engine_kind_asked_for_is_launched_and_its_pool_replays_only_where_it_can(tmp_path: Path,
                                                                                    calls: dict) -> None:
    calls["result"] = StartResult.model_construct(outcome=Outcome.ok, server=_Server(),
                                                  boot_facts=BootFacts(engine="sglang", kv_cache_tokens=4096))
    notes: list[str] = []
    with served_module.served(tmp_path, {}, tmp_path, "bench", "k", False, notes.append,
                              "sglang") as (_, _, kv_tokens):
        assert kv_tokens is None  # SGLang's radix cache is not vLLM's block pool: no replayed rate
    assert calls["kinds"] == ["sglang"] and notes[0] == f"starting SGLang on {tmp_path} ..."


def test_a_server_that_does_not_start_is_no_result(tmp_path: Path, calls: dict) -> None:
    calls["result"] = StartResult(outcome=Outcome.oom, detail="CUDA out of memory")
    with pytest.raises(NoResult, match="the server did not start: oom: CUDA out of memory"):
        with served_module.served(tmp_path, {}, tmp_path, "bench", None, False, lambda line: None):
            pass
    assert calls["stopped"] == []


def test_a_model_path_that_is_no_directory_is_refused_before_any_boot(tmp_path: Path, calls: dict) -> None:
    with pytest.raises(ServetuneError, match="--serve .*: not a directory"):
        with served_module.served(tmp_path / "absent", {}, tmp_path, "bench", None, False, lambda line: None):
            pass
    assert calls["started"] == []
