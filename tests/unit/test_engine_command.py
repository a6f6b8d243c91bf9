"""Building the server command from a base command and a Config."""

from __future__ import annotations

import sys

from servetune.engine.config import Config
from servetune.engine.vllm import DEFAULT_COMMAND, VllmEngine


def test_module_form_uses_running_interpreter_and_model_flag() -> None:
    engine = VllmEngine(DEFAULT_COMMAND, model="models/tiny")
    config = Config.of({"max_num_seqs": 8, "enable-prefix-caching": False, "async-scheduling": True,
                        "compilation-config": {"mode": 3}, "cudagraph-capture-sizes": [1, 2], "seed": None})
    argv = engine.build_command(config, 8123)
    assert argv == [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "models/tiny",
        "--max-num-seqs", "8", "--no-enable-prefix-caching", "--async-scheduling",
        "--compilation-config", '{"mode":3}', "--cudagraph-capture-sizes", "1", "2",
        "--host", "127.0.0.1", "--port", "8123",
    ]


def test_explicit_interpreter_path_is_kept() -> None:
    engine = VllmEngine(["/opt/py/bin/python3", "-m", "vllm.entrypoints.openai.api_server"], model="m")
    assert engine.build_command(Config(), 1)[0] == "/opt/py/bin/python3"


def test_vllm_serve_form_takes_model_positionally() -> None:
    argv = VllmEngine(["vllm", "serve"], model="Qwen/Qwen3-8B").build_command(Config.of({"max-model-len": 4096}), 9)
    assert argv == ["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "4096", "--host", "127.0.0.1", "--port", "9"]


def test_launcher_owns_host_and_port() -> None:
    argv = VllmEngine(["vllm", "serve"], model="m").build_command(Config.of({"port": 1, "host": "0.0.0.0"}), 9)
    assert argv == ["vllm", "serve", "m", "--host", "127.0.0.1", "--port", "9"]


def test_docker_form_flags_follow_the_image_with_host_network_and_env_by_name() -> None:
    engine = VllmEngine(["docker", "run", "--rm", "--gpus", "all", "vllm/vllm-openai:v0.26.0"], model="/models/q")
    config = Config.of({"max-num-seqs": 64}, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    argv = engine.build_command(config, 8000)
    assert argv == [
        "docker", "run", "--network=host", "-e", "VLLM_USE_FLASHINFER_SAMPLER", "--rm", "--gpus", "all",
        "vllm/vllm-openai:v0.26.0", "--model", "/models/q", "--max-num-seqs", "64",
        "--host", "127.0.0.1", "--port", "8000",
    ]
    assert "0" not in argv[:5]  # env values stay out of argv (docker reads them from the environment)


def test_docker_with_own_network_is_left_alone() -> None:
    argv = VllmEngine(["docker", "run", "--network", "mynet", "img"], model="m").build_command(Config(), 1)
    assert "--network=host" not in argv


def test_environment_is_os_environ_plus_config_env(monkeypatch) -> None:
    monkeypatch.setenv("SERVETUNE_TEST_OUTER", "kept")
    env = VllmEngine(model="m").environment(Config.of(env={"VLLM_SERVER_DEV_MODE": 1}))
    assert env["SERVETUNE_TEST_OUTER"] == "kept" and env["VLLM_SERVER_DEV_MODE"] == "1"


def test_served_model_name() -> None:
    engine = VllmEngine(model="models/tiny")
    assert engine.served_model_name(Config()) == "models/tiny"
    assert engine.served_model_name(Config.of({"served_model_name": "tiny"})) == "tiny"


def test_serve_flags_from_argv() -> None:
    from servetune.cli.serve_cmd import flags_from_argv

    argv = ["--max_num_seqs", "8", "--async-scheduling", "--no-enable-prefix-caching",
            "--cudagraph-capture-sizes", "1", "2", '--compilation-config={"mode":3}']
    assert flags_from_argv(argv) == {
        "max-num-seqs": "8", "async-scheduling": True, "enable-prefix-caching": False,
        "cudagraph-capture-sizes": ["1", "2"], "compilation-config": {"mode": 3},
    }
    # round trip through the renderer gives vLLM the same argv back
    from servetune.engine.config import render_flags
    assert render_flags(flags_from_argv(argv)) == [
        "--max-num-seqs", "8", "--async-scheduling", "--no-enable-prefix-caching",
        "--cudagraph-capture-sizes", "1", "2", "--compilation-config", '{"mode":3}']


def test_serve_rejects_a_value_before_any_flag() -> None:
    import pytest

    from servetune.cli.serve_cmd import flags_from_argv
    from servetune.errors import ServetuneError

    with pytest.raises(ServetuneError, match="must start with --NAME"):
        flags_from_argv(["8", "--max-num-seqs"])


def test_serve_failed_start_exits_nonzero_with_failure_class(tmp_path) -> None:
    from typer.testing import CliRunner

    from servetune.cli import app

    script = "import sys; print('api_server.py: error: unrecognized arguments: --bogus'); sys.exit(2)"
    result = CliRunner().invoke(app, ["serve", "--model", "m", "--log-dir", str(tmp_path),
                                      "--command", f"python -c \"{script}\"", "--", "--bogus", "1"])
    assert result.exit_code == 1
    assert "start failed: invalid_arg" in result.output
    assert "unrecognized arguments: --bogus" in result.output
