"""A local server process: launched in its own process group, watched, torn down.

Engine-agnostic: it knows argv, environment, a log file and a health URL, nothing about vLLM.
servetune only ever signals process groups it created itself (or, on resume, one whose leader
still has the pid *and* creation time that servetune recorded when it started it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO

import psutil
from pydantic import BaseModel

from .outcome import Outcome
from .ports import LOOPBACK, wait_port_free

# The server is on loopback: never route the health check through an HTTP(S)_PROXY.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# psutil reports create_time rounded to clock ticks; equal processes agree far closer than this.
_CREATE_TIME_TOLERANCE_S = 0.05


class ServerInfo(BaseModel):
    """What a store needs to find (and, on resume, safely stop) a server later."""

    url: str
    port: int
    pid: int
    pgid: int
    create_time: float
    log_path: str
    started_at: float
    startup_seconds: float | None = None


class StopReport(BaseModel):
    """Teardown result: processes of the group still present afterwards, and whether the port is free."""

    left_pids: list[int]
    port_free: bool
    forced: bool  # True when SIGKILL was needed after the grace period

    @property
    def clean(self) -> bool:
        return not self.left_pids and self.port_free


class HealthWait(StrEnum):
    healthy = "healthy"
    exited = "exited"
    timeout = "timeout"


@dataclass
class Server:
    """A running server started by servetune. `check()` is for callers between runs: a server
    that died after it became healthy is a crash, not a slow run."""

    url: str
    port: int
    pid: int
    pgid: int
    create_time: float
    log_path: Path
    started_at: float  # wall clock (time.time()) at launch
    startup_seconds: float | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    def exit_code(self) -> int | None:
        if self._proc is not None:
            return self._proc.poll()
        return None if psutil.pid_exists(self.pid) else -1

    def is_alive(self) -> bool:
        return self.exit_code() is None

    def check(self) -> Outcome:
        return Outcome.ok if self.is_alive() else Outcome.crashed

    def info(self) -> ServerInfo:
        return ServerInfo(
            url=self.url, port=self.port, pid=self.pid, pgid=self.pgid, create_time=self.create_time,
            log_path=str(self.log_path), started_at=self.started_at, startup_seconds=self.startup_seconds,
        )


def launch(argv: list[str], env: dict[str, str], log_path: Path, port: int, host: str = LOOPBACK,
           redact: Callable[[str], str] = str) -> Server:
    """Start `argv` (no shell) in a new session, stdout+stderr into `log_path`. The launch line
    servetune writes at the top of the log goes through `redact` (secret values masked)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the Server, closed at teardown
    log.write(redact(f"# servetune launch: {argv!r}\n").encode())
    log.flush()
    started_at = time.time()
    try:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: teardown signals the whole tree
        )
    except OSError:
        log.close()
        raise
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:  # died instantly; keep a placeholder, it is reaped below anyway
        create_time = started_at
    return Server(
        url=f"http://{host}:{port}", port=port, pid=proc.pid, pgid=proc.pid, create_time=create_time,
        log_path=log_path, started_at=started_at, _proc=proc, _log=log,
    )


def wait_healthy(server: Server, timeout_s: float, path: str = "/health", poll_s: float = 0.5) -> HealthWait:
    """Poll GET `path` until 200; return at once when the process exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not server.is_alive():
            return HealthWait.exited
        try:
            with _DIRECT.open(server.url + path, timeout=2.0) as resp:
                if resp.status == 200:
                    server.startup_seconds = time.time() - server.started_at
                    return HealthWait.healthy
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() >= deadline:
            return HealthWait.timeout
        _sleep_or_exit(server, poll_s)


def _sleep_or_exit(server: Server, seconds: float) -> None:
    if server._proc is not None:
        try:
            server._proc.wait(timeout=seconds)  # returns early when the process exits
        except subprocess.TimeoutExpired:
            pass
    else:
        time.sleep(seconds)


def terminate(server: Server, grace_s: float = 20.0, port_wait_s: float = 10.0) -> StopReport:
    """SIGTERM to the group, wait `grace_s`, SIGKILL what is left; then verify group and port."""
    try:
        leader = psutil.Process(server.pid)
    except psutil.NoSuchProcess:
        leader = None
    forced = _terminate_group(server.pgid, leader, grace_s)
    if server._proc is not None:
        try:
            server._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if server._log is not None and not server._log.closed:
        server._log.close()
    left = [p.pid for p in group_members(server.pgid)]
    return StopReport(left_pids=left, port_free=wait_port_free(server.port, port_wait_s), forced=forced)


def stop_if_ours(pid: int, pgid: int, create_time: float, grace_s: float = 20.0) -> bool:
    """Stop a server left over by an earlier servetune process (resume after a kill).

    Acts only when the process `pid` still exists with the recorded creation time and still leads
    group `pgid`: a recycled pid belongs to someone else and is never touched. True when it stopped
    something.
    """
    try:
        leader = psutil.Process(pid)
        if abs(leader.create_time() - create_time) > _CREATE_TIME_TOLERANCE_S:
            return False
        if os.getpgid(pid) != pgid:
            return False
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False
    _terminate_group(pgid, leader, grace_s)
    return True


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _terminate_group(pgid: int, leader: psutil.Process | None, grace_s: float) -> bool:
    """TERM, grace, KILL. Descendants of the leader that moved to another group are ours too
    (found via the parent chain while the leader lives), so they are signalled individually."""
    tracked: dict[int, psutil.Process] = {p.pid: p for p in group_members(pgid)}
    if leader is not None:
        try:
            tracked.setdefault(leader.pid, leader)
            for child in leader.children(recursive=True):
                tracked.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
    _signal_group(pgid, signal.SIGTERM, tracked.values())
    _, alive = psutil.wait_procs(list(tracked.values()), timeout=grace_s)
    alive += [p for p in group_members(pgid) if p.pid not in tracked]
    if not alive:
        return False
    _signal_group(pgid, signal.SIGKILL, alive)
    psutil.wait_procs(alive, timeout=5)
    return True


def _signal_group(pgid: int, sig: signal.Signals, procs: object) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:  # type: ignore[attr-defined]
        try:
            if proc.is_running():  # psutil checks pid + create_time: never a recycled pid
                proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
