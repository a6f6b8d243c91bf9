"""The ready-to-paste config: vllm serve command, docker compose service, Kubernetes container."""

from __future__ import annotations

import shlex

import yaml

from servetune.engine.config import Config, render_flags
from servetune.report.emit import Deployment, compose_yaml, k8s_yaml, serve_command, write_snippets

CONFIG = Config.of(
    {"max-num-batched-tokens": 16384, "async-scheduling": False, "enable-prefix-caching": True,
     "compilation-config": {"cudagraph_mode": "FULL_AND_PIECEWISE"}, "limit-mm-per-prompt": '{"image": 1}',
     "kv-cache-memory-bytes": "2GiB", "port": 8123, "host": "127.0.0.1", "served-model-name": "my model"},
    {"VLLM_USE_V1": "1", "NOTE": "two words; $HOME"},
)
ENGINE = {"model": "Qwen/Qwen3-8B"}
EXPECTED_FLAGS = {k: v for k, v in CONFIG.flags.items() if k not in ("port", "host")}


def test_command_round_trips_through_shlex() -> None:
    dep = Deployment.of(CONFIG, ENGINE, "0.26.0")
    words = shlex.split(serve_command(dep))
    assert words[:2] == ["NOTE=two words; $HOME", "VLLM_USE_V1=1"]
    assert words[2:] == ["vllm", "serve", "Qwen/Qwen3-8B", *render_flags(EXPECTED_FLAGS)]
    assert "--port" not in words and "--host" not in words
    assert "--no-async-scheduling" in words and "2147483648" in words


def test_compose_parses_and_carries_flags_and_env() -> None:
    dep = Deployment.of(CONFIG, ENGINE, "0.26.0+cu129")
    svc = yaml.safe_load(compose_yaml(dep))["services"]["vllm"]
    assert svc["image"] == "vllm/vllm-openai:v0.26.0"
    assert svc["command"] == ["Qwen/Qwen3-8B", *render_flags(EXPECTED_FLAGS)]
    assert svc["environment"] == {"NOTE": "two words; $HOME", "VLLM_USE_V1": "1"}


def test_k8s_args_equal_render_flags() -> None:
    dep = Deployment.of(CONFIG, ENGINE)
    container = yaml.safe_load(k8s_yaml(dep))["containers"][0]
    assert container["args"] == ["Qwen/Qwen3-8B", *render_flags(EXPECTED_FLAGS)]
    assert container["env"] == [{"name": "NOTE", "value": "two words; $HOME"}, {"name": "VLLM_USE_V1", "value": "1"}]
    assert container["image"] == "vllm/vllm-openai:latest"


def test_local_model_directory_is_mounted(tmp_path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    dep = Deployment.of(Config.of({"max-num-seqs": 8}), {"model": str(model)})
    svc = yaml.safe_load(compose_yaml(dep))["services"]["vllm"]
    assert svc["command"][0] == "/models/tiny"
    assert f"{model.resolve()}:/models/tiny:ro" in svc["volumes"]


def test_written_files(tmp_path) -> None:
    paths = write_snippets(Deployment.of(CONFIG, ENGINE), tmp_path / "winner")
    script = paths["command"].read_text().splitlines()
    assert script[0] == "#!/bin/sh"
    assert shlex.split(script[1]) == ["export", "NOTE=two words; $HOME"]
    assert shlex.split(script[-1])[:3] == ["exec", "vllm", "serve"]
    assert Config.model_validate_json(paths["config"].read_text()).flags == EXPECTED_FLAGS
