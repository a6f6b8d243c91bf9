"""A local server process: launched in its own process group, watched, torn down.

Engine-agnostic: it knows argv, environment, a log file and a health URL, nothing about vLLM.
servetune only ever signals processes proven to be its own: the process group it created, the
leader's descendants, and any process whose environment carries the launch token it put there
(`SERVETUNE_TRIAL_TOKEN`): a child that double-forked and `setsid()`ed away still inherits it.

The token is chosen, and written to the store, *before* the spawn: a tuner killed between the
spawn and recording the pid leaves a server that recovery still finds by its token.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import IO

import psutil
from pydantic import BaseModel

from ..server_http import DIRECT as _DIRECT  # the server is on loopback: never through a proxy
from ..vocabulary import Outcome
from .boot_progress import BootProgress
from .ports import LOOPBACK, listening_pids, wait_port_free
from .uninterruptible import signals_deferred

# psutil reports create_time rounded to clock ticks; equal processes agree far closer than this.
_CREATE_TIME_TOLERANCE_S = 0.05

# The environment variable that marks every process of one launch (inherited across forks).
LAUNCH_TOKEN_ENV = "SERVETUNE_TRIAL_TOKEN"


def new_launch_token() -> str:
    return secrets.token_hex(12)


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
    launch_token: str | None = None


class StopReport(BaseModel):
    """Teardown result: processes of ours still present afterwards, and whether the port is free."""

    left_pids: list[int]
    port_free: bool
    forced: bool  # True when SIGKILL was needed after the grace period
    port: int | None = None
    port_holders: list[int] = []  # who still listens on the port (not proven ours, so not signalled)

    @property
    def clean(self) -> bool:
        return not self.left_pids and self.port_free

    def problem(self) -> str | None:
        """One line for a trial's detail when teardown left something behind; None when clean."""
        parts = []
        if self.left_pids:
            parts.append(f"process(es) {', '.join(map(str, self.left_pids))} still running")
        if not self.port_free:
            held = f" by pid {', '.join(map(str, self.port_holders))}" if self.port_holders else ""
            parts.append(f"port {self.port} still held{held}")
        return f"teardown left {' and '.join(parts)}" if parts else None


class HealthWait(StrEnum):
    healthy = "healthy"
    exited = "exited"
    timeout = "timeout"  # the overall cap passed, the log still moving
    stalled = "stalled"  # the log stopped moving for the stall window


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
    launch_token: str | None = None  # in the environment of the server and all it starts
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
            launch_token=self.launch_token,
        )


def launch(argv: list[str], env: dict[str, str], log_path: Path, port: int, host: str = LOOPBACK,
           launch_token: str | None = None, redact: Callable[[str], str] = str,
           cpus: Iterable[int] | None = None) -> Server:
    """Start `argv` (no shell) in a new session, stdout+stderr into `log_path`. `launch_token`
    goes into the environment as SERVETUNE_TRIAL_TOKEN (record it before calling: see above).
    `cpus` confines the server to those CPUs (its children inherit them).
    The launch line servetune writes at the top of the log goes through `redact` (secret values
    masked)."""
    if launch_token is not None:
        env = {**env, LAUNCH_TOKEN_ENV: launch_token}
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
    if cpus is not None:
        # Set at once, in the parent (a preexec_fn is unsafe with threads): the interpreter starts
        # for far longer than this takes, before the server starts any child.
        try:
            os.sched_setaffinity(proc.pid, set(cpus))
        except ProcessLookupError:
            pass  # died instantly: the health wait reports it
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:  # died instantly; keep a placeholder, it is reaped below anyway
        create_time = started_at
    return Server(
        url=f"http://{host}:{port}", port=port, pid=proc.pid, pgid=proc.pid, create_time=create_time,
        log_path=log_path, started_at=started_at, launch_token=launch_token, _proc=proc, _log=log,
    )


def wait_healthy(server: Server, timeout_s: float, path: str = "/health", poll_s: float = 0.5,
                 progress: BootProgress | None = None, stall_s: float | None = None) -> HealthWait:
    """Poll GET `path` until 200; return at once when the process exits. With `progress` and
    `stall_s`, give up early once the boot log has not grown for `stall_s` (`stalled`); `timeout_s`
    stays the cap of a boot that keeps logging."""
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
        if progress is not None:
            progress.poll()
            if stall_s is not None and progress.silent_s() >= stall_s:
                return HealthWait.stalled
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
    """SIGTERM to everything of ours, wait `grace_s`, SIGKILL what is left; then verify that none
    of it is left and that the port is free. Ctrl-C/SIGTERM are held until it returns."""
    with signals_deferred():
        leader = _process(server.pid)
        forced = _stop_processes(partial(_launched, server, leader), grace_s, pgid=server.pgid)
        if server._proc is not None:
            try:
                server._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if server._log is not None and not server._log.closed:
            server._log.close()
        port_free = wait_port_free(server.port, port_wait_s)
        holders = [] if port_free else [p for p in map(_process, listening_pids(server.port)) if p is not None]
        ours = [p for p in holders if _started_by(p, server)]
        if ours:  # e.g. a grandchild that cleared its environment but kept our session
            forced = _stop_processes(lambda: [p for p in ours if p.is_running()], grace_s) or forced
            port_free = wait_port_free(server.port, port_wait_s)
        left = sorted(p.pid for p in _launched(server, None))
        still = [] if port_free else listening_pids(server.port)
    return StopReport(left_pids=left, port_free=port_free, forced=forced, port=server.port, port_holders=still)


def stop_if_ours(pid: int | None, pgid: int | None, create_time: float | None, grace_s: float = 20.0, *,
                 launch_token: str | None = None, created_before: float | None = None) -> bool:
    """Stop what a server left over by an earlier servetune process (resume after a kill).

    Signals only processes proven ours: the group `pgid` while its leader `pid` still has the
    recorded creation time (a recycled pid belongs to someone else and is never touched); when the
    leader is gone, the group's survivors that carry `launch_token` (stores without a token: those
    created between the leader and `created_before`); and anything carrying `launch_token`, so a
    server whose pid was never recorded is found too. True when it stopped something.
    """
    leader = _recorded_leader(pid, pgid, create_time)

    def find() -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        if leader is not None and pgid is not None:
            found.update((p.pid, p) for p in group_members(pgid))
            found.update((p.pid, p) for p in _descendants(leader))
        elif pgid is not None and create_time is not None:
            found.update((p.pid, p) for p in group_members(pgid)
                         if _survivor_is_ours(p, launch_token, create_time, created_before))
        found.update((p.pid, p) for p in carrying_token(launch_token))
        found.pop(os.getpid(), None)
        return list(found.values())

    if not find():
        return False
    _stop_processes(find, grace_s, pgid=pgid if leader is not None else None)
    return True


def carrying_token(token: str | None) -> list[psutil.Process]:
    """Live processes of this user whose environment holds SERVETUNE_TRIAL_TOKEN=`token`: the
    server launched with it and everything it started, whatever group or session they moved to."""
    return processes_with_env(LAUNCH_TOKEN_ENV, token) if token else []


def processes_with_env(name: str, value: str) -> list[psutil.Process]:
    """Live processes of this user, other than this one, whose environment holds name=value."""
    found = []
    uid = os.getuid()
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            if proc.pid == os.getpid() or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(name) == value:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


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


def _launched(server: Server, leader: psutil.Process | None) -> list[psutil.Process]:
    """Every live process of one launch: its group, the leader's descendants (they may have moved
    to another group; found via the parent chain while the leader lives) and the token's carriers."""
    found: dict[int, psutil.Process] = {p.pid: p for p in group_members(server.pgid)}
    if leader is not None:
        found.update((p.pid, p) for p in _descendants(leader))
    found.update((p.pid, p) for p in carrying_token(server.launch_token))
    found.pop(os.getpid(), None)
    return list(found.values())


def _descendants(leader: psutil.Process) -> list[psutil.Process]:
    try:
        if not leader.is_running():
            return []
        return [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _recorded_leader(pid: int | None, pgid: int | None, create_time: float | None) -> psutil.Process | None:
    """The process `pid` if it still has the recorded creation time and leads group `pgid`."""
    if pid is None or pgid is None or create_time is None:
        return None
    try:
        leader = psutil.Process(pid)
        if abs(leader.create_time() - create_time) > _CREATE_TIME_TOLERANCE_S or os.getpgid(pid) != pgid:
            return None
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None
    return leader


def _survivor_is_ours(proc: psutil.Process, token: str | None, leader_created: float,
                      created_before: float | None) -> bool:
    """A member of a group whose leader is gone: ours if it carries our token; a store without
    tokens can only offer its creation time, between the leader's and the end of the trial."""
    try:
        if token:
            return proc.environ().get(LAUNCH_TOKEN_ENV) == token
        if created_before is None:
            return False
        return leader_created - _CREATE_TIME_TOLERANCE_S <= proc.create_time() <= created_before
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _started_by(proc: psutil.Process, server: Server) -> bool:
    """A port holder is ours if it carries the token or lives in the server's session (which
    `start_new_session` opened with the leader's pid) and was created after the leader."""
    try:
        if server.launch_token and proc.environ().get(LAUNCH_TOKEN_ENV) == server.launch_token:
            return True
        return (os.getsid(proc.pid) == server.pid
                and proc.create_time() >= server.create_time - _CREATE_TIME_TOLERANCE_S)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ProcessLookupError):
        return False


def _stop_processes(find: Callable[[], list[psutil.Process]], grace_s: float, pgid: int | None = None) -> bool:
    """TERM, grace, KILL. `find` is asked again after the grace period, so processes forked
    meanwhile are killed too; `pgid` (a group proven ours) is signalled as a whole as well.
    True when SIGKILL was needed."""
    tracked: dict[int, psutil.Process] = {p.pid: p for p in find()}
    _signal_group(pgid, signal.SIGTERM, tracked.values())
    _, alive = psutil.wait_procs(list(tracked.values()), timeout=grace_s)
    alive += [p for p in find() if p.pid not in tracked]
    if not alive:
        return False
    _signal_group(pgid, signal.SIGKILL, alive)
    psutil.wait_procs(alive, timeout=5)
    return True


def _signal_group(pgid: int | None, sig: signal.Signals, procs: Iterable[psutil.Process]) -> None:
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            if proc.is_running():  # psutil checks pid + create_time: never a recycled pid
                proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
