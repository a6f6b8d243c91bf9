"""The ready-to-paste config: vllm serve command, docker compose service, Kubernetes container."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
import yaml

from servetune.engine.config import Config, render_flags
from servetune.engine.provenance import parse_inspect
from servetune.errors import ServetuneError
from servetune.report.emit import IMAGE_PLACEHOLDER, Deployment, compose_yaml, k8s_yaml, serve_command, write_snippets

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
    assert container["image"] == IMAGE_PLACEHOLDER   # no version known: no tag guessed


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


HOSTILE = "$(touch pwned1); `touch pwned2`; ' ; touch pwned3; '\"$HOME\nline"
HOSTILE_DEP = Deployment.of(
    Config.of({"served-model-name": HOSTILE, "override-generation-config": {"x": "$(touch pwned4)"},
               "chat-template": ["a;touch pwned5", "b"]}, {"NOTE": HOSTILE}),
    {"model": "/models/my model; touch pwned6", "secret_env": ["HF_TOKEN"]})


def _run_serve_sh(tmp_path, env: dict[str, str]):
    """serve.sh run by sh with a stub `vllm` that prints its argv and NOTE, NUL-separated."""
    script = write_snippets(HOSTILE_DEP, tmp_path / "winner")["command"]
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\" \"NOTE=$NOTE\"\n")
    stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["sh", str(script)], cwd=work, capture_output=True,
                          env={"PATH": f"{stub.parent}:/usr/bin:/bin", **env})
    return script, work, done


def test_serve_sh_passes_hostile_text_as_data(tmp_path) -> None:
    script, work, done = _run_serve_sh(tmp_path, {"HF_TOKEN": "hf_caller_value"})
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert done.returncode == 0, done.stderr
    argv = done.stdout.decode().split("\0")[:-1]
    assert argv == ["serve", *HOSTILE_DEP.args, f"NOTE={HOSTILE}"]
    assert argv[1] == "/models/my model; touch pwned6" and HOSTILE in argv
    assert list(work.iterdir()) == []  # nothing ran: no pwned* file
    assert "hf_caller_value" not in script.read_text()


def test_serve_sh_stops_when_a_secret_is_not_in_the_environment(tmp_path) -> None:
    _, _, done = _run_serve_sh(tmp_path, {})
    assert done.returncode != 0 and b"set HF_TOKEN" in done.stderr and done.stdout == b""


def test_secrets_are_emitted_by_name_and_a_secret_flag_becomes_its_variable(tmp_path) -> None:
    config = Config.of({"max-num-seqs": 8, "api-key": "sk-from-an-old-store"}, {"VLLM_USE_V1": "1"})
    dep = Deployment.of(config, {"model": "m", "secret_env": ["HF_TOKEN"]})
    assert dep.secret_env == ("HF_TOKEN", "VLLM_API_KEY") and "api-key" not in dep.flags
    paths = write_snippets(dep, tmp_path)
    text = "".join(p.read_text() for p in paths.values()) + serve_command(dep)
    assert "sk-from-an-old-store" not in text and "--api-key" not in text
    compose = yaml.safe_load(paths["compose"].read_text())["services"]["vllm"]
    assert compose["environment"] == ["VLLM_USE_V1=1", "HF_TOKEN", "VLLM_API_KEY"]
    env = yaml.safe_load(paths["kubernetes"].read_text())["containers"][0]["env"]
    assert env[0] == {"name": "VLLM_USE_V1", "value": "1"}
    assert env[2] == {"name": "VLLM_API_KEY",
                      "valueFrom": {"secretKeyRef": {"name": "servetune-secrets", "key": "vllm-api-key"}}}
    assert json.loads(paths["config"].read_text())["secret_env"] == ["HF_TOKEN", "VLLM_API_KEY"]


@pytest.mark.parametrize("env, secrets", [({"X; touch pwned": "1"}, ()), ({}, ("A B",))])
def test_a_hostile_variable_name_cannot_be_emitted(env, secrets) -> None:
    with pytest.raises(ServetuneError, match="is not an environment variable name"):
        Deployment(model="m", flags={}, env=env, secret_env=secrets)


def test_a_development_build_gets_no_derived_tag() -> None:
    dep = Deployment.of(CONFIG, ENGINE, "0.19.1rc1.dev231+g9dd5ee011")
    compose, k8s = compose_yaml(dep), k8s_yaml(dep)
    assert yaml.safe_load(compose)["services"]["vllm"]["image"] == IMAGE_PLACEHOLDER
    assert yaml.safe_load(k8s)["containers"][0]["image"] == IMAGE_PLACEHOLDER
    for text in (compose, k8s):
        assert "0.19.1rc1" not in text.replace(dep.image_note(), "")   # only the comment names the version
        assert "development build" in text and "commit 9dd5ee011" in text


def test_the_measured_image_is_emitted_pinned_by_its_digest() -> None:
    image = parse_inspect("vllm/vllm-openai:nightly", 'sha256:aa ["vllm/vllm-openai@sha256:44"]')
    dep = Deployment.of(CONFIG, ENGINE, "0.19.1rc1.dev231+g9dd5ee011", image)
    assert yaml.safe_load(compose_yaml(dep))["services"]["vllm"]["image"] == "vllm/vllm-openai@sha256:44"
    assert yaml.safe_load(k8s_yaml(dep))["containers"][0]["image"] == "vllm/vllm-openai@sha256:44"
    assert "pinned by its registry digest" in compose_yaml(dep)


def test_a_measured_image_without_a_digest_is_named_and_the_snippet_says_so() -> None:
    dep = Deployment.of(CONFIG, ENGINE, "0.32.0", parse_inspect("mine:local", "sha256:bb []"))
    assert yaml.safe_load(compose_yaml(dep))["services"]["vllm"]["image"] == "mine:local"
    assert "no registry digest" in compose_yaml(dep)


def test_serve_sh_names_the_build_measured(tmp_path) -> None:
    paths = write_snippets(Deployment.of(CONFIG, ENGINE, "0.32.1.dev12+g1234abc"), tmp_path / "winner")
    script = paths["command"].read_text().splitlines()
    assert script[1].startswith("# Measured with vLLM 0.32.1.dev12+g1234abc (development build")
    assert "commit 1234abc" in script[1]
