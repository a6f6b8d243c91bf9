"""A run's hold on a study directory (tune/session.py), as the study and the A/B runner take it:
the lock before anything is written and released whatever happens, the session row ended with
its reason, SIGTERM ending the run as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from servetune.errors import ServetuneError
from servetune.store import StudyStore
from servetune.tune.lock import StudyLock
from servetune.tune.session import TunerSession


def _refuse(store: StudyStore) -> None:
    raise ServetuneError(f"{store.path}: this directory holds a different study")


def _accept(store: StudyStore) -> None:
    store.set_meta_json("checked", True)


def test_a_refused_directory_leaves_the_lock_free(tmp_path: Path) -> None:
    with pytest.raises(ServetuneError, match="holds a different study"):
        TunerSession.open(tmp_path, _refuse)
    with StudyLock(tmp_path):   # not held by the refused run
        pass


def test_the_lock_is_held_from_open_until_the_run_ends(tmp_path: Path) -> None:
    session = TunerSession.open(tmp_path, _accept)
    assert session.store.get_meta_json("checked") is True
    with pytest.raises(ServetuneError, match="study is being run by"):
        TunerSession.open(tmp_path, _accept)
    with session.running():
        session.end_reason = "finished"
    (row,) = session.store.sessions()
    assert row.id == session.id and row.ended_at is not None and row.end_reason == "finished"
    with StudyLock(tmp_path):
        pass


def test_sigterm_ends_the_run_as_ctrl_c_and_the_row_says_interrupted(tmp_path: Path) -> None:
    session = TunerSession.open(tmp_path, _accept)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), session.running():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)                    # the handler's KeyboardInterrupt cuts it short
        session.end_reason = "finished"   # never reached
    assert signal.getsignal(signal.SIGTERM) is before
    (row,) = session.store.sessions()
    assert row.end_reason == "interrupted"
    with StudyLock(tmp_path):
        pass
