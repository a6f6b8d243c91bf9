"""Teardown under faults, with real child processes: a double fork that keeps the port, a group
whose leader died, a signal to the tuner while it stops a server, a kill between spawn and record."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import servetune
from servetune.engine import launch as launch_module
from servetune.engine.launch import (
    carrying_token,
    group_members,
    launch,
    new_launch_token,
    stop_if_ours,
    terminate,
)
from servetune.engine.ports import free_port, port_is_free
from servetune.store import StudyStore
from servetune.tune.recovery import reclaim_unfinished

PY = sys.executable
SRC = str(Path(servetune.__file__).resolve().parents[1])

# The leader stays up; its child setsid()s away and forks a grandchild that listens on the port
# (argv[1]) and writes its pid to argv[2]; the child exits, so the grandchild belongs to init.
DOUBLE_FORK = """
import os, socket, sys, time
port, pid_file = int(sys.argv[1]), sys.argv[2]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""

# The leader starts a member of its group that writes its pid to argv[1], then dies.
ORPHANED_MEMBER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, sys, time; "
                  "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
                  "os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)", sys.argv[1]])
"""

# Leader and child both ignore SIGTERM: only the SIGKILL after the grace period ends them.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(sys.argv[1], 'w').write('up'); time.sleep(600)", sys.argv[1]])
time.sleep(600)
"""

# A tuner killed right after spawning its server, before the pid reaches the store.
KILLED_AFTER_SPAWN = """
import os, socket, sys
import psutil
from pathlib import Path
from servetune.engine.config import Config
from servetune.engine.vllm import VllmEngine
from servetune.store import StudyStore, TrialRole
from servetune.tune.trial import TrialExecutor, TrialPlan
out = Path(sys.argv[1])
store = StudyStore.in_dir(out)
session = store.begin_session(pid=os.getpid(), host=socket.gethostname(),
                              pid_create_time=psutil.Process().create_time())
trial = store.begin_trial(TrialRole.baseline, Config(), {}, session_id=session)


def killed(trial_id, *, pid, **recorded):
    (out / "spawned.pid").write_text(str(pid))  # for the test's cleanup only, never for recovery
    os._exit(9)  # dies as a SIGKILL would: no cleanup, the pid never reaches the store


store.record_server = killed
engine = VllmEngine([sys.executable, "-c", "import time; time.sleep(600)"], model="m", startup_timeout_s=600)
TrialExecutor(engine, store, out, None).run(trial, TrialPlan([], 1, 1), enough=lambda t, r: True,
                                             progress=lambda *a: None)
"""


def _wait_for_file(path: Path, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def _kill_pids(pids: list[int], create_times: dict[int, float]) -> None:
    """Test cleanup: SIGKILL exactly the processes this test started (pid + create time)."""
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - create_times[pid]) < 0.05:
                proc.kill()
                proc.wait(5)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass


@pytest.fixture
def started() -> Iterator[dict[int, float]]:
    """pid -> create time of processes a test started; whatever is still alive is killed after it."""
    pids: dict[int, float] = {}
    yield pids
    _kill_pids(list(pids), pids)


def _track(started: dict[int, float], pid: int) -> psutil.Process:
    proc = psutil.Process(pid)
    started[pid] = proc.create_time()
    return proc


def test_double_forked_child_that_keeps_the_port_is_stopped(tmp_path: Path, started: dict[int, float]) -> None:
    port = free_port()
    pid_file = tmp_path / "grandchild.pid"
    server = launch([PY, "-c", DOUBLE_FORK, str(port), str(pid_file)], {}, tmp_path / "d.log", port,
                    launch_token=new_launch_token())
    _track(started, server.pid)
    grandchild = _track(started, int(_wait_for_file(pid_file)))
    assert os.getsid(grandchild.pid) != server.pid and not port_is_free(port)  # its own session, holds the port

    report = terminate(server, grace_s=5, port_wait_s=5)

    assert not grandchild.is_running()
    assert report.clean and report.problem() is None and port_is_free(port)


def test_port_held_by_a_process_not_ours_is_reported_and_left_alone(tmp_path: Path, started: dict[int, float]) -> None:
    port = free_port()
    server = launch([PY, "-c", "import time; time.sleep(600)"], {}, tmp_path / "p.log", port,
                    launch_token=new_launch_token())
    _track(started, server.pid)
    with socket.socket() as holder:  # this test process: certainly not started by servetune
        holder.bind(("127.0.0.1", port))
        holder.listen()
        report = terminate(server, grace_s=5, port_wait_s=0.5)
        assert not report.clean and not report.port_free and report.left_pids == []
        assert report.port_holders == [os.getpid()]
        assert report.problem() == f"teardown left port {port} still held by pid {os.getpid()}"
    assert not server.is_alive()


def test_resume_stops_members_of_a_group_whose_leader_died(tmp_path: Path, started: dict[int, float]) -> None:
    pid_file = tmp_path / "member.pid"
    token = new_launch_token()
    server = launch([PY, "-c", ORPHANED_MEMBER, str(pid_file)], {}, tmp_path / "o.log", free_port(),
                    launch_token=token)
    _track(started, server.pid)
    member = _track(started, int(_wait_for_file(pid_file)))
    server._proc.wait(timeout=30)  # type: ignore[union-attr]  # the leader is gone, its member is not
    assert group_members(server.pgid) == [member]

    # A kill before the server was recorded is covered too, but here pid/pgid/create time are known.
    assert stop_if_ours(server.pid, server.pgid, server.create_time, grace_s=5, launch_token=token) is True
    assert not member.is_running()


def test_resume_without_a_token_uses_creation_time_and_never_touches_others(
        tmp_path: Path, started: dict[int, float]) -> None:
    # A store written before launch tokens: only members created between the leader and the end of
    # the trial are provably ours.
    pid_file = tmp_path / "member.pid"
    server = launch([PY, "-c", ORPHANED_MEMBER, str(pid_file)], {}, tmp_path / "o.log", free_port())
    _track(started, server.pid)
    member = _track(started, int(_wait_for_file(pid_file)))
    server._proc.wait(timeout=30)  # type: ignore[union-attr]

    ended_before_member = member.create_time() - 1.0
    assert stop_if_ours(server.pid, server.pgid, server.create_time, grace_s=5,
                        created_before=ended_before_member) is False
    assert stop_if_ours(server.pid, server.pgid, server.create_time, grace_s=5) is False
    assert member.is_running()
    assert stop_if_ours(server.pid, server.pgid, server.create_time, grace_s=5, created_before=time.time()) is True
    assert not member.is_running()


def _raise_interrupt(signum: int, frame: object) -> None:  # the runner's SIGTERM handler
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]],
                         ids=["sigterm", "ctrl-c-twice"])
def test_a_signal_during_teardown_does_not_stop_the_sigkill_escalation(
        tmp_path: Path, started: dict[int, float], monkeypatch: pytest.MonkeyPatch, signals: list[int]) -> None:
    up = tmp_path / "child.up"
    server = launch([PY, "-c", STUBBORN, str(up)], {}, tmp_path / "s.log", free_port(),
                    launch_token=new_launch_token())
    _track(started, server.pid)
    _wait_for_file(up)
    (child,) = [p for p in group_members(server.pgid) if p.pid != server.pid]
    _track(started, child.pid)

    real_wait = psutil.wait_procs
    calls = []

    def signalled_during_grace(*args: object, **kwargs: object) -> object:
        if not calls:  # the first wait is the grace period after SIGTERM: the user interrupts there
            for sig in signals:
                os.kill(os.getpid(), sig)
        calls.append(1)
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(launch_module.psutil, "wait_procs", signalled_during_grace)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):  # delivered once, after the teardown
            terminate(server, grace_s=1, port_wait_s=1)
            time.sleep(1)  # not reached: the interrupt arrives as terminate returns
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not server.is_alive() and not child.is_running()
    assert group_members(server.pgid) == []


def test_kill_between_spawn_and_record_leaves_a_server_recovery_finds(tmp_path: Path) -> None:
    tuner = subprocess.run([PY, "-c", KILLED_AFTER_SPAWN, str(tmp_path)], env={**os.environ, "PYTHONPATH": SRC},
                           capture_output=True, text=True, timeout=120)
    assert tuner.returncode == 9, tuner.stderr
    orphan = psutil.Process(int((tmp_path / "spawned.pid").read_text()))
    started = {orphan.pid: orphan.create_time()}
    try:
        store = StudyStore.open_existing(tmp_path)
        (trial,) = store.unfinished_trials()
        assert trial.server_pid is None and trial.launch_token  # the pid never reached the store
        assert carrying_token(trial.launch_token) == [orphan]

        notes: list[str] = []
        (reopened,) = reclaim_unfinished(store, store.begin_session(), notes.append)

        assert not orphan.is_running()
        assert carrying_token(trial.launch_token) == []
        assert reopened.id == trial.id and reopened.launch_token is None and reopened.status == "running"
        assert notes and "interrupted run of trial #1" in notes[0]
    finally:
        _kill_pids(list(started), started)
