"""One tuner per study directory, and telling a live tuner's session from a dead one's.

The lock is `fcntl.flock` on `DIR/tune.lock`: the kernel drops it when its holder exits, however
it exits, so a SIGKILLed tuner never leaves a stale lock. The file also names the holder (pid,
host, start time) for the message the next tuner prints; the file itself is never deleted
(deleting it would let two processes lock two different files of the same name).
Read-only commands (`status`, `report`) do not take it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import psutil

from ..errors import ServetuneError
from ..store.sqlite import SessionInfo

LOCK_FILENAME = "tune.lock"

# Another host's tuner (a shared file system) can only be judged by its heartbeat, every few seconds.
HEARTBEAT_STALE_S = 60.0
_CREATE_TIME_TOLERANCE_S = 0.05


class StudyLock:
    """Held by the process that runs a study, from before it writes anything until it is done."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / LOCK_FILENAME
        self._file: IO[str] | None = None

    def acquire(self) -> StudyLock:
        """Take the lock or raise ServetuneError naming the process that holds it."""
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+")  # noqa: SIM115 - held open for as long as the lock is held
        except OSError as exc:
            raise ServetuneError(f"{self.path}: cannot create the study lock: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(handle)
            handle.close()
            raise ServetuneError(f"{self.out_dir}: study is being run by {holder}; wait for it or stop it") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(asdict(TunerProcess.current())))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None

    def __enter__(self) -> StudyLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class TunerProcess:
    """The running tuner as a session row and the lock file name it: pid + creation time tell it
    from a later process that got the same pid."""

    pid: int
    host: str
    pid_create_time: float
    started_at: float

    @classmethod
    def current(cls) -> TunerProcess:
        return cls(pid=os.getpid(), host=socket.gethostname(), pid_create_time=psutil.Process().create_time(),
                   started_at=time.time())


def session_is_live(session: SessionInfo, now: float | None = None) -> bool:
    """Whether the tuner process that ran `session` still exists.

    On this host: its pid still has the recorded creation time (a recycled pid is someone else).
    Elsewhere, or in a store from before owners were recorded: it heartbeated within a minute.
    """
    if session.ended_at is not None:
        return False
    if session.pid is not None and session.host == socket.gethostname() and session.pid_create_time is not None:
        try:
            return abs(psutil.Process(session.pid).create_time() - session.pid_create_time) <= _CREATE_TIME_TOLERANCE_S
        except psutil.NoSuchProcess:
            return False
    return (now if now is not None else time.time()) - session.last_seen < HEARTBEAT_STALE_S


def describe_holder(pid: object, host: object, started_at: object) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(started_at)) if isinstance(started_at, float | int) else "?"
    here = "" if host == socket.gethostname() else f" on {host}"
    return f"servetune pid {pid}{here} (started {when})"


def _read_holder(handle: IO[str]) -> str:
    try:
        handle.seek(0)
        info = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another servetune process"  # it holds the lock but has not written its name yet
    return describe_holder(info.get("pid"), info.get("host"), info.get("started_at"))
