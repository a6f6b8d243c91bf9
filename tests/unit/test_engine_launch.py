"""Process lifecycle with real (non-vLLM) processes: own group, early exit, teardown, resume safety."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil

from servetune.engine.config import Config
from servetune.engine.launch import HealthWait, group_members, launch, stop_if_ours, terminate, wait_healthy
from servetune.engine.ports import free_port, port_is_free
from servetune.engine.vllm import VllmEngine
from servetune.vocabulary import Outcome

PY = sys.executable
# A child that ignores SIGTERM: only SIGKILL after the grace period removes it.
STUBBORN_TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(\"child up\", flush=True); time.sleep(600)'])\n"
    "time.sleep(600)\n"
)


def test_early_exit_is_noticed_at_once(tmp_path: Path) -> None:
    server = launch([PY, "-c", "import sys; print('bye'); sys.exit(3)"], {}, tmp_path / "a.log", free_port())
    assert wait_healthy(server, timeout_s=120) is HealthWait.exited
    assert server.exit_code() == 3 and not server.is_alive() and server.check() is Outcome.crashed
    assert "bye" in (tmp_path / "a.log").read_text()


def test_real_http_server_becomes_healthy_and_teardown_frees_port(tmp_path: Path) -> None:
    port = free_port()
    server = launch([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"], {}, tmp_path / "h.log", port)
    assert server.pgid == server.pid  # its own process group
    assert wait_healthy(server, timeout_s=60, path="/") is HealthWait.healthy
    assert server.startup_seconds is not None and server.startup_seconds > 0
    assert server.check() is Outcome.ok and not port_is_free(port)
    report = terminate(server, grace_s=10)
    assert report.clean and not report.forced
    assert group_members(server.pgid) == [] and port_is_free(port)


def test_teardown_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    server = launch([PY, "-c", STUBBORN_TREE], {}, log, free_port())
    deadline = time.monotonic() + 30
    while "\nchild up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(group_members(server.pgid)) == 2
    report = terminate(server, grace_s=1)
    assert report.forced and report.left_pids == []


def test_startup_timeout_outcome_and_cleanup(tmp_path: Path) -> None:
    # A process that never serves HTTP: the engine gives up after its startup timeout and stops it.
    engine = VllmEngine([PY, "-c", "import time; time.sleep(600)"], model="m", startup_timeout_s=1.5,
                        log_dir=tmp_path)
    result = engine.start(Config(), tmp_path / "s.log")
    assert result.outcome is Outcome.startup_timeout and result.server is None
    launched = result.argv
    assert launched[:3] == [PY, "-c", "import time; time.sleep(600)"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == launched]


def test_given_busy_port_is_port_in_use_without_starting(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        engine = VllmEngine([PY, "-c", "raise SystemExit(9)"], model="m", log_dir=tmp_path)
        result = engine.start(Config(), tmp_path / "p.log", port=port)
    assert result.outcome is Outcome.port_in_use and result.argv == []
    assert not (tmp_path / "p.log").exists()


def test_stop_if_ours_checks_pid_and_create_time(tmp_path: Path) -> None:
    server = launch([PY, "-c", "import time; time.sleep(600)"], {}, tmp_path / "r.log", free_port())
    try:
        # a recorded create_time that does not match: someone else's process under a reused pid
        assert stop_if_ours(server.pid, server.pgid, server.create_time - 100) is False
        assert server.is_alive()
        assert stop_if_ours(server.pid, server.pgid + 1, server.create_time) is False
        assert server.is_alive()
        assert stop_if_ours(server.pid, server.pgid, server.create_time, grace_s=5) is True
        server._proc.wait(timeout=10)  # type: ignore[union-attr]
        assert not server.is_alive()
    finally:
        terminate(server, grace_s=1)
