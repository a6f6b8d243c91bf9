"""`init --serve-cmd` takes the deployment as people run it: a `docker run` line or a docker
compose service (the GB10 report's whole workflow), keeping image, env and volumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import assert_one_line_error, servetune

from servetune.engine.config import Config
from servetune.engine.vllm import VllmEngine
from servetune.errors import ServetuneError
from servetune.study import load_study
from servetune.study.serve_line import parse_serve_line

# The GB10 report's final service (its in-command comments left out: compose would pass them to vLLM).
REPORT_COMPOSE = """\
services:
  qwen35_vllm:
    image: vllm/vllm-openai:cu130-nightly
    container_name: qwen35
    restart: unless-stopped
    ports: ["8000:8000"]
    environment:
      HF_TOKEN: ${HF_TOKEN}
      TORCHINDUCTOR_COMPILE_THREADS: "1"
      VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS: "1"   # more exact accounting
    volumes:
      - ~/.cache/huggingface:/root/.cache/huggingface
      - triton-cache:/root/.cache/torch/triton
      # no tuned MoE config bind-mount
    ipc: host
    deploy:
      resources:
        reservations:
          devices: [{driver: nvidia, count: all, capabilities: [gpu]}]
    command: >
      Qwen/Qwen3.5-35B-A3B-FP8
      --max-model-len 131072
      --max-num-batched-tokens 65536
      --gpu-memory-utilization 0.45
      --max-num-seqs 32
      --kv-cache-dtype fp8_e4m3
      --enable-chunked-prefill
      --enable-prefix-caching
      --no-async-scheduling
      --limit-mm-per-prompt '{"image":1}'
      --trust-remote-code
  marker:
    image: example/marker-pipeline:1
volumes:
  triton-cache: {}
"""


def test_a_docker_run_line_keeps_image_env_and_volumes_and_leaves_out_what_fights_the_launch() -> None:
    line = parse_serve_line("docker run -d --name q --gpus all -p 8000:8000 --ipc=host "
                            "-v /data/hf:/root/.cache/huggingface -e HF_TOKEN=hf_not_written -e OMP_NUM_THREADS=1 "
                            "-it vllm/vllm-openai:v0.10.0 --model Qwen/Qwen3-8B --max-num-seqs 64 --port 8000")
    assert line.command == ["docker", "run", "--gpus", "all", "--ipc=host", "-v", "/data/hf:/root/.cache/huggingface",
                            "vllm/vllm-openai:v0.10.0"]
    assert (line.model, line.args, line.port) == ("Qwen/Qwen3-8B", {"max-num-seqs": 64}, 8000)
    assert line.env == {"OMP_NUM_THREADS": "1"} and line.secret_env == ["HF_TOKEN"]  # its value is not kept
    assert line.dropped == ["-d (servetune supervises the server)", "--name (slots would clash)",
                            "-p (the server listens on the host network)", "-i", "-t"]


def test_a_docker_run_line_with_vllm_serve_after_the_image_and_a_home_volume() -> None:
    line = parse_serve_line("docker run --rm --entrypoint vllm -v ~/models:/models -e HF_HOME vllm/vllm-openai "
                            "serve /models/qwen --tp 2")
    assert line.command == ["docker", "run", "--rm", "--entrypoint", "vllm", "-v", f"{Path.home()}/models:/models",
                            "vllm/vllm-openai", "serve"]
    assert (line.model, line.args, line.secret_env) == ("/models/qwen", {"tensor-parallel-size": 2}, ["HF_HOME"])


def test_the_report_s_compose_service_becomes_the_baseline(tmp_path: Path) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(REPORT_COMPOSE)
    line = parse_serve_line(str(compose))  # two services: the one running a vllm image
    assert line.command == [
        "docker", "run", "--rm", "-v", f"{Path.home()}/.cache/huggingface:/root/.cache/huggingface",
        "-v", "triton-cache:/root/.cache/torch/triton", "--ipc=host", "--gpus=all", "vllm/vllm-openai:cu130-nightly"]
    assert line.model == "Qwen/Qwen3.5-35B-A3B-FP8"
    assert line.args == {"max-model-len": 131072, "max-num-batched-tokens": 65536, "gpu-memory-utilization": 0.45,
                         "max-num-seqs": 32, "kv-cache-dtype": "fp8_e4m3", "enable-chunked-prefill": True,
                         "enable-prefix-caching": True, "async-scheduling": False,
                         "limit-mm-per-prompt": {"image": 1}, "trust-remote-code": True}
    assert line.env == {"TORCHINDUCTOR_COMPILE_THREADS": "1", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}
    assert line.secret_env == ["HF_TOKEN"]
    assert line.dropped == ["ports (compose)", "container_name (compose)", "restart (compose)"]
    assert parse_serve_line(f"{compose}:qwen35_vllm").args == line.args


@pytest.mark.parametrize(("text", "needle"), [
    ("{dir}/compose.yml:nope", "no service 'nope' (services: qwen35_vllm, marker)"),
    ("{dir}/compose.yml:marker", "no model in the command line"),
    ("{dir}/missing.yml", "missing.yml: not a readable YAML file"),
    ("{dir}/bare.yml", "no `services:` mapping"),
    ("docker run --gpus", "--gpus needs a value"),
    ("docker run -d", "no image in the docker run line"),
])
def test_a_bad_deployment_is_one_line_naming_where(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "compose.yml").write_text(REPORT_COMPOSE)
    (tmp_path / "bare.yml").write_text("version: '3'\n")
    with pytest.raises(ServetuneError, match=None) as caught:
        parse_serve_line(text.format(dir=tmp_path))
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_init_from_a_compose_file_writes_a_study_that_runs_the_same_container(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_never_written")
    compose = tmp_path / "compose.yml"
    compose.write_text(REPORT_COMPOSE.replace("${HF_TOKEN}", "hf_never_written"))  # a literal token too
    study = tmp_path / "study.yaml"
    result = servetune("init", study, "--serve-cmd", f"{compose}:qwen35_vllm", "--gpus", "1",
                       "--gpu-memory-gib", "128", "--compute-capability", "12.1", "--offline")
    assert result.code == 0, result
    text = study.read_text()
    assert "hf_never_written" not in text
    assert "left out of your line: ports (compose), container_name (compose), restart (compose)" in text
    spec = load_study(study)
    assert spec.engine.command[-1] == "vllm/vllm-openai:cu130-nightly"
    assert spec.engine.args["kv-cache-dtype"] == "fp8_e4m3" and spec.engine.env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert spec.engine.secrets.names == ("HF_TOKEN",)
    launched = VllmEngine.from_spec(spec.engine).build_command(Config.of(dict(spec.engine.args), spec.engine.env), 8001)
    assert launched[:4] == ["docker", "run", "--network=host", "-e"]
    assert "-v" in launched and "vllm/vllm-openai:cu130-nightly" in launched
    assert launched[launched.index("vllm/vllm-openai:cu130-nightly") + 1:][:2] == ["--model", "Qwen/Qwen3.5-35B-A3B-FP8"]


def test_a_compose_file_that_is_not_there_is_a_one_line_error_of_init(tmp_path: Path) -> None:
    assert_one_line_error(servetune("init", tmp_path / "s.yaml", "--serve-cmd", str(tmp_path / "nope.yaml")),
                          "nope.yaml: not a readable YAML file")
