"""Start and stop the fake streaming server as a child process of the test (its own group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servetune.engine.ports import free_port
from servetune.server_http import DIRECT

SCRIPT = Path(__file__).with_name("fake_stream_server.py")


@contextmanager
def fake_server(ttft_ms: float, itl_ms: float, tokens_per_chunk: int = 1, processes: int = 1,
                log: bool = True, *, stall_after_chunks: int | None = None, api_key: str | None = None,
                models_status: int = 200, slots: int | None = None, drift_long_tokens: int | None = None,
                drift_step_itl_ms: float = 0.0, drift_step_ttft_ms: float = 0.0,
                die_after_requests: int | None = None, prefix_cache_block: int | None = None,
                stall_prompts_from: int | None = None, ttft_growth_ms_per_s: float = 0.0,
                leak_kib_per_request: int = 0) -> Iterator[str]:
    """Yields the base URL of a running fake server; stops exactly the processes it started.
    The keyword options switch on the fake's faults (see fake_stream_server.py)."""
    port = free_port()
    argv = [sys.executable, str(SCRIPT), "--port", str(port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
            "--tokens-per-chunk", str(tokens_per_chunk), "--processes", str(processes),
            "--models-status", str(models_status)]
    if not log:
        argv.append("--no-log")
    if stall_after_chunks is not None:
        argv += ["--stall-after-chunks", str(stall_after_chunks)]
    if api_key is not None:
        argv += ["--api-key", api_key]
    if slots is not None:
        argv += ["--slots", str(slots)]
    if drift_long_tokens is not None:
        argv += ["--drift-long-tokens", str(drift_long_tokens), "--drift-step-itl-ms", str(drift_step_itl_ms),
                 "--drift-step-ttft-ms", str(drift_step_ttft_ms)]
    if die_after_requests is not None:
        argv += ["--die-after-requests", str(die_after_requests)]
    if prefix_cache_block is not None:
        argv += ["--prefix-cache-block", str(prefix_cache_block)]
    if stall_prompts_from is not None:
        argv += ["--stall-prompts-from", str(stall_prompts_from)]
    if ttft_growth_ms_per_s:
        argv += ["--ttft-growth-ms-per-s", str(ttft_growth_ms_per_s)]
    if leak_kib_per_request:
        argv += ["--leak-kib-per-request", str(leak_kib_per_request)]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}  # the key is api_key's alone
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                DIRECT.open(url + "/health", timeout=1).read()  # direct: a test may set a dead proxy
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake server did not start (exit {proc.poll()})") from None
                time.sleep(0.1)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # it died on its own (--die-after-requests)
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
