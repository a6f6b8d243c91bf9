"""A boot that is slow but alive is waited for; one whose log stops moving fails, naming its phase.

Stand-in servers (a Python script, no vLLM) write boot-like lines at their own pace and serve
/health once done. The stall window is seconds here; nothing asserts how long anything took."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servetune.engine.boot_progress import NOT_STARTED, BootProgress, phase_of
from servetune.engine.config import Config
from servetune.engine.vllm import VllmEngine
from servetune.vocabulary import Outcome

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
PY = sys.executable
SERVE_HEALTH = (
    "import http.server\n"
    "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a):\n"
    "        pass\n"
    "http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()\n"
)
# Longer in all than the stall window, but never silent for long: loading, compiling, capturing.
SLOW_BUT_ALIVE = (
    "import sys, time\n"
    "for i in range(12):\n"
    "    print(f'Loading safetensors checkpoint shards: {i}/12', flush=True); time.sleep(0.25)\n"
    "for i in range(12):\n"
    "    print(f'[AutoTuner]: Tuning fp4_gemm: {i}/12', flush=True); time.sleep(0.25)\n"
    "for i in range(12):\n"
    "    print(f'Capturing CUDA graphs (PIECEWISE): {i}/12', flush=True); time.sleep(0.25)\n"
    "print('Application startup complete.', flush=True)\n"
) + SERVE_HEALTH
STUCK_COMPILING = (
    "import time\n"
    "print('Starting to load model models/tiny...', flush=True)\n"
    "print('Dynamo bytecode transform time: 8.04 s', flush=True)\n"
    "time.sleep(600)\n"
)
CAPTURING_FOREVER = (
    "import time\n"
    "i = 0\n"
    "while True:\n"
    "    print(f'Capturing CUDA graphs (PIECEWISE): {i}/51', flush=True); i += 1; time.sleep(0.1)\n"
)


def engine(tmp_path: Path, script: str, *, timeout_s: float, stall_s: float) -> VllmEngine:
    return VllmEngine([PY, "-c", script], model="m", startup_timeout_s=timeout_s, startup_stall_s=stall_s,
                      log_dir=tmp_path)


def test_a_boot_longer_than_the_stall_window_that_keeps_logging_is_healthy(tmp_path: Path) -> None:
    eng = engine(tmp_path, SLOW_BUT_ALIVE, timeout_s=300, stall_s=2.0)
    result = eng.start(Config(), tmp_path / "boot.log")
    try:
        assert result.outcome is Outcome.ok, result.detail
    finally:
        if result.server is not None:
            eng.stop(result.server)


def test_a_boot_whose_log_stops_fails_naming_the_phase_it_stopped_in(tmp_path: Path) -> None:
    result = engine(tmp_path, STUCK_COMPILING, timeout_s=300, stall_s=1.5).start(Config(), tmp_path / "boot.log")
    assert result.outcome is Outcome.startup_timeout and result.server is None
    assert "stopped moving for 2 s while compiling" in result.detail, result.detail
    assert "Dynamo bytecode transform" in result.detail


def test_the_overall_cap_ends_a_boot_that_logs_forever(tmp_path: Path) -> None:
    result = engine(tmp_path, CAPTURING_FOREVER, timeout_s=1.5, stall_s=120).start(Config(), tmp_path / "b.log")
    assert result.outcome is Outcome.startup_timeout
    assert "not healthy within 2 s, the log still moving, capturing CUDA graphs" in result.detail, result.detail


@pytest.mark.parametrize(("log", "phases"), [
    ("vllm026-gpu-q8b-default-boot.txt", ["initializing the engine", "loading the model", "compiling",
                                          "profiling memory, sizing the KV cache", "capturing CUDA graphs",
                                          "starting the API server"]),
    ("vllm032-cpu-auto-fit.log", ["initializing the engine", "loading the model",
                                  "profiling memory, sizing the KV cache", "starting the API server"]),
])
def test_real_boot_logs_go_through_their_phases_in_order(log: str, phases: list[str]) -> None:
    seen: list[str] = []
    for line in (FIXTURES / log).read_text(errors="replace").splitlines():
        phase = phase_of(line)
        if phase is not None and (not seen or seen[-1] != phase):
            seen.append(phase)
    assert seen == phases


def test_progress_reads_only_what_the_log_gained(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    progress = BootProgress(log)
    assert not progress.poll() and progress.phase == NOT_STARTED  # no log yet
    log.write_text("# servetune launch: ['vllm']\nINFO Starting to load model m...\n")
    assert progress.poll() and progress.phase == "loading the model"
    assert not progress.poll()  # nothing new
    with log.open("a") as f:
        f.write("INFO Dynamo bytecode transform time: 1.6 s\nsome line with no phase\n")
    assert progress.poll() and progress.phase == "compiling"
    assert progress.where() == "compiling (last line: some line with no phase)"
