"""Start and stop the fake streaming server as a child process of the test (its own group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servetune.engine.ports import free_port

SCRIPT = Path(__file__).with_name("fake_stream_server.py")


@contextmanager
def fake_server(ttft_ms: float, itl_ms: float, tokens_per_chunk: int = 1, processes: int = 1,
                log: bool = True) -> Iterator[str]:
    """Yields the base URL of a running fake server; stops exactly the processes it started."""
    port = free_port()
    argv = [sys.executable, str(SCRIPT), "--port", str(port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
            "--tokens-per-chunk", str(tokens_per_chunk), "--processes", str(processes)]
    if not log:
        argv.append("--no-log")
    proc = subprocess.Popen(argv, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake server did not start (exit {proc.poll()})") from None
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
