"""Server faults through each measuring command (bench, capacity, drift), against stand-in servers:
one that accepts connections and never answers, one whose streams stall after a chunk, and one
killed mid-run. Each ends with exit 1, a line naming what happened (and the option that sets the
limit that ran out), no traceback, and what was measured kept. No vLLM is started."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from cli_run import Outcome, servetune

from servetune.server_http import DIRECT
from tests.fakes.launch import fake_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Small workloads, so that a healthy part of a run takes well under a second on the fake server.
COMMANDS = {
    "bench": ["bench", "--scenario", "single-decode", "--input-len", "8", "--output-len", "8", "--num-prompts", "3",
              "--warmups", "0"],
    "capacity": ["capacity", "--scenario", "chat-bursty", "--slo", "ttft:p50=1000", "--input-len", "8",
                 "--output-len", "8", "--num-prompts", "6", "--max-levels", "2", "--endpoint", "completions",
                 "--start", "1"],  # no saturation probe: the server dies at a level, whose runs are kept
    "drift": ["drift", "--short-per-phase", "2", "--long-requests", "1", "--short-input-len", "8",
              "--short-output-len", "4", "--long-input-len", "32", "--long-output-len", "4", "--warmups", "0"],
}


def _ended_cleanly_without_result(result: Outcome, *needles: str) -> str:
    assert result.code == 1, result
    assert "Traceback" not in result.stdout + result.stderr, result
    text = " ".join((result.stdout + result.stderr).split())
    for needle in needles:
        assert needle in text, (needle, text)
    return text


@contextmanager
def silent_server() -> Iterator[str]:
    """A port whose kernel accepts connections that nobody ever reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_server_that_never_answers_is_named_with_its_limit(tmp_path: Path, command: str) -> None:
    with silent_server() as url:
        result = servetune(*COMMANDS[command], "--url", url, "--out", tmp_path / "r.json",
                           "--first-byte-timeout", "1")
    _ended_cleanly_without_result(result, "no answer to GET", "within 1 s (--first-byte-timeout)", "nothing written")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_stalled_stream_is_named_and_what_was_measured_is_kept(tmp_path: Path, command: str) -> None:
    with fake_server(ttft_ms=0, itl_ms=0, stall_after_chunks=1) as url:
        result = servetune(*COMMANDS[command], "--url", url, "--out", tmp_path / "r.json", "--stall-timeout", "0.5")
    text = _ended_cleanly_without_result(result, "stalled", "no data for 0.5 s")
    if command == "bench":  # the failed run kept, marked as such (compare refuses it)
        assert json.loads((tmp_path / "r.json").read_text())["outcome"] == "stalled"
    elif command == "drift":  # the phase that stalled is kept under r.runs/, and said to be
        assert f"kept under {tmp_path / 'r.runs'}" in text
        assert json.loads((tmp_path / "r.runs" / "phase00-short-after-0.json").read_text())["outcome"] == "stalled"
    else:  # capacity stalls in its warmups: nothing was measured, and nothing claims to be a result
        assert "warmup" in text and f"nothing written to {tmp_path / 'r.json'}" in text
        assert not (tmp_path / "r.json").exists()


# Completion requests served before the server dies: bench dies in its second request; capacity
# after its first level (1 warmup + 6), in the second; drift after its first short phase and the
# long request, in the next short phase.
DIES_AFTER = {"bench": 1, "capacity": 10, "drift": 3}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_server_that_dies_mid_run_is_no_result(tmp_path: Path, command: str) -> None:
    with fake_server(ttft_ms=0, itl_ms=0, die_after_requests=DIES_AFTER[command]) as url:
        result = servetune(*COMMANDS[command], "--url", url, "--out", tmp_path / "r.json")
    text = _ended_cleanly_without_result(result, "crashed")
    doc = json.loads((tmp_path / "r.json").read_text())  # what was measured is kept, marked
    if command == "bench":
        assert doc["outcome"] == "crashed" and "not a result" in text
    else:  # the levels or phases measured before the crash, with the error that ended the search
        assert doc["error"] and "did not finish" in text


def test_bench_writes_exactly_the_names_given(tmp_path: Path) -> None:
    with fake_server(ttft_ms=0, itl_ms=0) as url:
        result = servetune(*COMMANDS["bench"], "--url", url, "--out", tmp_path / "res.txt")
    assert result.code == 0, result
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.txt", "res.txt.requests.jsonl"]
    assert json.loads((tmp_path / "res.txt").read_text())["completed"] == 3


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_during_bench_is_one_line_and_ends_every_client_process(tmp_path: Path, workers: str) -> None:
    out = tmp_path / "r.json"
    with fake_server(ttft_ms=0, itl_ms=50) as url:  # 200 tokens at 50 ms: each request takes 10 s
        proc = subprocess.Popen([sys.executable, "-m", "servetune", *COMMANDS["bench"], "--output-len", "200",
                                 "--num-prompts", "20", "--concurrency", "2", "--workers", workers, "--url", url,
                                 "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        wait_for_requests(url)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole foreground group
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert [line for line in stderr.splitlines() if line.strip()] == [f"interrupted; nothing written to {out}"]
    assert not out.exists()
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
               for p in psutil.Process().children(recursive=True) if "servetune" in " ".join(p.cmdline()))


def wait_for_requests(url: str) -> None:
    """Until the fake server has received a completion request (the measured phase has begun)."""
    for _ in range(1200):
        with DIRECT.open(url + "/fake/seen", timeout=5) as resp:
            if json.loads(resp.read())["requests"] > 0:
                return
        time.sleep(0.1)
    raise AssertionError("bench sent no request within 2 minutes")
