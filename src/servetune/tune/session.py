"""A study directory run by this tuner: its lock, its store and this run's session row, as the
study runner and the A/B runner both hold them.

`TunerSession.open` takes the lock before anything is read or written (a second tuner on the
directory stops there, and the first one's live trial is never mistaken for one a killed tuner
left behind), opens the store and checks it holds the study being run. `running()` is the run:
its session row, SIGTERM taken as Ctrl-C, and on the way out the row ended with its reason and
the lock released, however the run ends. `reclaim` hands back what a killed tuner left unfinished.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..store import StudyStore, Trial
from .lock import StudyLock, TunerProcess
from .recovery import StopFn, reclaim_unfinished, stop_on_this_host

HEARTBEAT_EVERY_S = 5.0   # well under lock.HEARTBEAT_STALE_S, and few writes to the store


class TunerSession:
    """The lock, the store, and (inside `running()`) this run's session id and end reason."""

    def __init__(self, lock: StudyLock, store: StudyStore):
        self.lock = lock
        self.store = store
        self.id = 0
        # What the session row says when the run ends: the runner sets "finished" or "paused".
        self.end_reason = "interrupted"
        self._last_heartbeat = 0.0

    @classmethod
    def open(cls, out_dir: Path, check: Callable[[StudyStore], None]) -> TunerSession:
        """Take the lock, open the store and `check` that it holds this study (or raise); the lock
        is released when either fails, and nothing but `check` writes before the run."""
        lock = StudyLock(out_dir).acquire()
        try:
            store = StudyStore.in_dir(out_dir)
            check(store)
        except BaseException:
            lock.release()
            raise
        return cls(lock, store)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The run: a session row naming this process (a later tuner tells whether it lives),
        ended with `end_reason` and the lock released on the way out."""
        me = TunerProcess.current()
        self.id = self.store.begin_session(pid=me.pid, host=me.host, pid_create_time=me.pid_create_time)
        try:
            with sigterm_as_interrupt():
                yield
        finally:
            self.store.end_session(self.id, self.end_reason)
            self.lock.release()

    def reclaim(self, note: Callable[[str], None], stop: StopFn = stop_on_this_host) -> list[Trial]:
        """Trials a killed tuner left running: their leftovers stopped (with `stop`: where they
        ran), reopened under this session, to be run again (their stored runs count)."""
        return reclaim_unfinished(self.store, self.id, note, stop=stop)

    def heartbeat(self) -> None:
        """Tell other tuners this one lives; called often (progress), written every few seconds."""
        now = time.monotonic()
        if now - self._last_heartbeat > HEARTBEAT_EVERY_S:
            self._last_heartbeat = now
            self.store.heartbeat(self.id)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the run as Ctrl-C does (the runner then stops every server it started).
    Signals reach Python's main thread only and a handler is the whole process's: a runner
    driven from another thread (an embedding program) leaves the process's handler alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run ends through the same cleanup (session ended, servers stopped)."""
    raise KeyboardInterrupt(f"signal {signum}")
