"""One tuner per study directory: the lock, its message, recovery that leaves live owners alone,
read-only commands while a tuner runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import servetune
from servetune.cli import app
from servetune.engine.config import Config
from servetune.engine.launch import Server, launch, new_launch_token, terminate
from servetune.engine.ports import free_port
from servetune.errors import ServetuneError
from servetune.store import StudyStore, TrialRole
from servetune.study.spec import StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.lock import StudyLock, TunerProcess
from servetune.tune.recovery import reclaim_unfinished
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS

PY = sys.executable
SRC = str(Path(servetune.__file__).resolve().parents[1])

# Without the lock, a second runner would get as far as booting: make that quick and harmless.
SPEC = StudySpec.model_validate({
    "name": "locked",
    "engine": {"command": [PY, "-c", "raise SystemExit(3)"], "model": str(MODEL_WITHOUT_WEIGHTS)},
    "scenarios": [{"name": "s", "input_len": 8, "output_len": 8, "num_prompts": 1}],
    "strategy": "baseline",
    "replicates": 1,
})

# Takes the lock, says so, then waits to be killed.
HOLDER = """
import sys, time
from pathlib import Path
from servetune.tune.lock import StudyLock
lock = StudyLock(Path(sys.argv[1])).acquire()  # held while referenced
print("locked", flush=True)
time.sleep(600)
"""


@pytest.fixture
def live_trial(tmp_path: Path) -> Iterator[tuple[StudyStore, Server]]:
    """A study whose trial #1 is being run by this process right now: its server is up and recorded."""
    store = StudyStore.in_dir(tmp_path)
    store.set_meta_json("spec", SPEC.model_dump(mode="json"))
    me = TunerProcess.current()
    session = store.begin_session(pid=me.pid, host=me.host, pid_create_time=me.pid_create_time)
    trial = store.begin_trial(TrialRole.baseline, SPEC.baseline_config(), {}, session_id=session)
    token = new_launch_token()
    store.record_launch(trial.id, launch_token=token, log_path="logs/t.log")
    server = launch([PY, "-c", "import time; time.sleep(600)"], {}, tmp_path / "logs" / "t.log", free_port(),
                    launch_token=token)
    store.record_server(trial.id, pid=server.pid, pgid=server.pgid, create_time=server.create_time,
                        log_path="logs/t.log")
    try:
        yield store, server
    finally:
        terminate(server, grace_s=1, port_wait_s=0)
        store.close()


def test_second_tuner_gets_one_line_naming_the_holder_and_leaves_its_server_alone(
        tmp_path: Path, live_trial: tuple[StudyStore, Server]) -> None:
    store, server = live_trial
    with StudyLock(tmp_path):  # the first tuner holds the study
        with pytest.raises(ServetuneError) as caught:
            StudyRunner(SPEC, tmp_path, display=StudyDisplay(enabled=False)).run()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path}: study is being run by servetune pid {os.getpid()} (started ")
    assert message.endswith("); wait for it or stop it")
    assert server.is_alive()
    assert len(store.sessions()) == 1 and store.trial(1).server_pid == server.pid  # nothing written


def test_lock_of_a_killed_tuner_is_gone_with_it(tmp_path: Path) -> None:
    holder = subprocess.Popen([PY, "-c", HOLDER, str(tmp_path)], env={**os.environ, "PYTHONPATH": SRC},
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(ServetuneError, match=rf"servetune pid {holder.pid} \(started \d\d:\d\d:\d\d\)"):
            StudyLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    with StudyLock(tmp_path) as lock:  # no stale lock: the kernel dropped it with its holder
        assert lock.path.is_file()


def test_recovery_refuses_a_trial_whose_owner_lives(tmp_path: Path, live_trial: tuple[StudyStore, Server]) -> None:
    # A tuner that does not take the lock (an older servetune) still must not lose its server.
    store, server = live_trial
    with pytest.raises(ServetuneError, match=r"trial #1 is being run by servetune pid \d+"):
        reclaim_unfinished(store, store.begin_session(), lambda note: None)
    assert server.is_alive() and store.trial(1).status == "running" and store.trial(1).server_pid == server.pid


def test_recovery_stops_the_server_of_a_trial_whose_owner_is_gone(tmp_path: Path) -> None:
    dead = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    store = StudyStore.in_dir(tmp_path)
    # the dead tuner's pid with a creation time no live process has
    session = store.begin_session(pid=int(dead.stdout), host=socket.gethostname(), pid_create_time=1.0)
    trial = store.begin_trial(TrialRole.baseline, Config(), {}, session_id=session)
    token = new_launch_token()
    store.record_launch(trial.id, launch_token=token, log_path="t.log")
    server = launch([PY, "-c", "import time; time.sleep(600)"], {}, tmp_path / "t.log", free_port(),
                    launch_token=token)
    store.record_server(trial.id, pid=server.pid, pgid=server.pgid, create_time=server.create_time, log_path="t.log")
    try:
        new_session = store.begin_session()
        (reopened,) = reclaim_unfinished(store, new_session, lambda note: None)
        assert not server.is_alive()
        assert reopened.session_id == new_session and reopened.server_pid is None
    finally:
        terminate(server, grace_s=1, port_wait_s=0)


def test_status_and_report_work_while_a_tuner_holds_the_study(
        tmp_path: Path, live_trial: tuple[StudyStore, Server]) -> None:
    store, server = live_trial
    with StudyLock(tmp_path):
        status = CliRunner().invoke(app, ["status", str(tmp_path)], env={"COLUMNS": "200"})
        assert status.exit_code == 0, status.output
        assert "running" in status.output
        report = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r")])
        assert report.exit_code == 0, report.output
        assert (tmp_path / "r" / "report.md").is_file()
    assert server.is_alive() and len(store.sessions()) == 1


def test_lock_file_that_cannot_be_created_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ServetuneError, match=r"cannot create the study lock"):
        StudyLock(blocker / "study").acquire()
