"""Commands build their engine through the registry: `--engine sglang` boots SGLang (its stand-in
here), and a command resting on a feature SGLang lacks refuses in one line before any boot."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.fakes.sglang_standin import __file__ as SGLANG_STANDIN
from tests.unit.cli_run import servetune


@pytest.mark.parametrize(("command", "feature"), [
    (["probe", "context"], "context probe"),
    (["probe", "utilization"], "utilization probe"),
])
def test_a_vllm_only_probe_is_refused_for_sglang(tmp_path: Path, command: list[str], feature: str) -> None:
    r = servetune(*command, "--model", tmp_path, "--engine", "sglang", "--command",
                  f"{sys.executable} {SGLANG_STANDIN}", "--log-dir", tmp_path / "logs")
    assert r.code == 2, r.stdout + r.stderr
    assert r.error_lines == [f"error: {' '.join(command)}: {feature} is not supported for sglang"]
    assert not list((tmp_path / "logs").glob("*.log"))  # nothing booted


def test_pinning_vllm_s_engine_core_is_refused_for_sglang(tmp_path: Path) -> None:
    r = servetune("serve", "--model", tmp_path, "--engine", "sglang", "--pin-engine-core", "--command",
                  f"{sys.executable} {SGLANG_STANDIN}", "--log-dir", tmp_path / "logs")
    assert r.code == 2, r.stdout + r.stderr
    assert r.error_lines == ["error: serve --pin-engine-core: EngineCore pinning is not supported for sglang"]
    assert not list((tmp_path / "logs").glob("*.log"))  # nothing booted


def test_an_unknown_engine_is_named_with_the_known_ones(tmp_path: Path) -> None:
    r = servetune("probe", "context", "--model", tmp_path, "--engine", "tgi", "--log-dir", tmp_path / "logs")
    assert r.code == 2 and r.error_lines == ["error: engine.kind: unknown engine 'tgi'; known: sglang, vllm"]
