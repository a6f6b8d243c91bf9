"""The server between windows: is it alive and answering /health, and how much memory does its
process tree hold (psutil RSS of the server and every process it started)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from .. import server_http
from ..engine.launch import Server

HEALTH_TIMEOUT_S = 10.0
HEALTH_RETRY_S = 2.0  # one slow or dropped /health answer is asked again before it counts as a crash


def tree_rss_bytes(pid: int) -> int | None:
    """RSS of `pid` and its descendants (None: the process is gone or not readable)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a worker that just ended, or another user's: the rest still count
    return total


def listening_pid(url: str) -> int | None:
    """The process listening on the URL's port on this host (None: another host, or not visible)."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    pids = {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    return pids.pop() if len(pids) == 1 else None  # several (SO_REUSEPORT workers): name one with --pid


def healthy(url: str, api_key: str | None) -> str | None:
    """None when GET /health answers 200, else why not."""
    try:
        server_http.get_json(url.rstrip("/") + "/health", api_key, timeout_s=HEALTH_TIMEOUT_S)
    except server_http.ServerAnswerError as exc:
        if exc.status == 200:  # an empty or non-JSON body: vLLM's /health answers 200 with nothing
            return None
        return str(exc)
    return None


@dataclass
class ServerWatch:
    """What is watched of one server: its URL, and its process when known (booted by servetune, or
    found listening on the URL's port, or named with --pid)."""

    url: str
    api_key: str | None
    pid: int | None = None
    server: Server | None = None   # set when servetune started it: its exit code is known

    def rss_bytes(self) -> int | None:
        return None if self.pid is None else tree_rss_bytes(self.pid)

    def gone(self) -> str | None:
        """Why the server is no longer serving (exited, or /health failing), or None."""
        if self.server is not None and not self.server.is_alive():
            return f"the server exited with code {self.server.exit_code()}"
        if self.server is None and self.pid is not None and not psutil.pid_exists(self.pid):
            return f"the server process {self.pid} is gone"
        why = healthy(self.url, self.api_key)
        if why is not None:
            time.sleep(HEALTH_RETRY_S)
            why = healthy(self.url, self.api_key)
        return None if why is None else f"health check failed twice, {HEALTH_RETRY_S:g} s apart: {why}"
