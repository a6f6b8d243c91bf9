"""Helper subprocesses die with the tuner: a SIGKILLed parent takes its helper with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from servetune.engine.helper_process import run_helper

pytestmark = pytest.mark.slow  # real processes

_PARENT = """
import sys
from servetune.engine.helper_process import run_helper
pid_file = sys.argv[1]
run_helper(sys.executable, ["-c", f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(120)"],
           timeout_s=300)
"""


def test_a_helper_answers_like_a_plain_subprocess() -> None:
    done = run_helper(sys.executable, ["-c", "import sys; print('hello'); sys.exit(3)"], timeout_s=30,
                      env={**os.environ, "X": "1"})
    assert (done.returncode, done.stdout.strip()) == (3, "hello")


def test_a_helper_times_out_as_subprocess_does() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_helper(sys.executable, ["-c", "import time; time.sleep(30)"], timeout_s=0.5)


def test_a_helper_dies_when_its_parent_is_sigkilled(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(pid_file)])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and parent.poll() is None, "the helper never started"
            time.sleep(0.05)
        helper = psutil.Process(int(pid_file.read_text()))
        assert helper.ppid() == parent.pid  # the guard exec'd into the command: the same process
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        gone, alive = psutil.wait_procs([helper], timeout=10)
        assert gone and not alive, "the helper outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_bare_interpreter_name_is_found_on_path(tmp_path: Path) -> None:
    """`python3.12` from an engine command or a shebang: looked up on PATH, as subprocess does."""
    (tmp_path / "mypython").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-c", "import os, sys; from servetune.engine.helper_process import "
                           "run_helper; d = run_helper('mypython', ['-c', 'print(42)'], timeout_s=30); "
                           "print(d.returncode, d.stdout.strip(), d.stderr.strip()[-200:])"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "0 42", done.stdout + done.stderr
