"""The H200 call scripts' own logic, with a stand-in tuner: a detached tuner outlives its call and
the next call attaches to it instead of starting another; a large snapshot comes back in parts
that join, in numeric order, to the archive."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDY_CALL = ROOT / "scripts" / "h200" / "study_call.sh"
RUNS = Path("/tmp/st-runs")   # where study_call.sh keeps a study and its tuner's files

# Writes a run file every half second; on SIGINT says so and exits as the real tuner does.
FAKE_TUNER = textwrap.dedent("""\
    #!{python}
    import os, pathlib, sys, time
    out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.sqlite").write_bytes(b"")
    print("tuner started, pid", os.getpid(), flush=True)
    try:
        for i in range(600):
            (out / f"run{{i}}.json").write_text("{{}}")
            print("run", i, flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("tuner stopped by SIGINT", flush=True)
        sys.exit(130)
""")


def _interrupt_session(sid: int) -> None:
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                proc.send_signal(signal.SIGINT)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue


def _load_snapshot_module():
    spec = importlib.util.spec_from_file_location("h200_snapshot", ROOT / "scripts" / "h200" / "snapshot.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class StudyCalls:
    """study_call.sh calls on one stand-in study, as the device would make them."""

    name: str
    study: Path
    out: Path
    env: dict[str, str]

    @property
    def tuner_pid_file(self) -> Path:
        return RUNS / f"{self.name}.tuner.pid"

    def call(self, seconds: int, detach: int | None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, **({"DETACH": str(detach)} if detach is not None else {}))
        seed = self.out.parent / f"{self.name}.tar.xz"   # absent: a new study
        return subprocess.run(["bash", str(STUDY_CALL), str(self.study), str(seed), str(seconds)],
                              env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def calls(tmp_path: Path) -> Iterator[StudyCalls]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tuner = bin_dir / "servetune"
    tuner.write_text(FAKE_TUNER.format(python=sys.executable))
    tuner.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    name = f"fake-{os.getpid()}-{time.monotonic_ns()}"
    study = tmp_path / "study.yaml"
    study.write_text(f"name: {name}\nengine: {{model: {model}}}\n")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               OUT=str(out), SNAPSHOT_S="1")
    calls = StudyCalls(name, study, out, env)
    yield calls
    if calls.tuner_pid_file.exists():  # the session of the tuner this test started, should an assert have failed first
        _interrupt_session(int(calls.tuner_pid_file.read_text().strip()))
    shutil.rmtree(RUNS / name, ignore_errors=True)
    for leftover in (calls.tuner_pid_file, RUNS / f"{name}.tuner.rc", RUNS / f"tune-{name}.log"):
        leftover.unlink(missing_ok=True)


def test_detached_tuner_outlives_its_call_and_the_next_call_attaches(calls: StudyCalls) -> None:
    first = calls.call(seconds=3, detach=9)
    assert first.returncode == 0, first.stderr
    assert "tuner left running" in first.stdout
    pid = calls.tuner_pid_file.read_text().strip()
    os.kill(int(pid), 0)  # still alive after the call returned

    second = calls.call(seconds=30, detach=9)
    assert second.returncode == 0, second.stderr
    assert f"attaching to the tuner still running (pid {pid})" in second.stdout
    assert "tune rc=124" in second.stdout  # stopped by its own 9-s limit, inside this call
    log = (calls.out / f"tune-{calls.name}.log").read_text()
    assert "tuner stopped by SIGINT" in log
    assert "tuner started" not in log  # only what it printed during the second call
    with tarfile.open(calls.out / f"{calls.name}.tar.xz") as tar:
        names = tar.getnames()
    assert f"{calls.name}/study.sqlite" in names
    assert sum(n.endswith(".json") for n in names) >= 10  # one tuner, runs of both calls


def test_without_detach_the_call_stops_its_tuner(calls: StudyCalls) -> None:
    result = calls.call(seconds=2, detach=None)
    assert result.returncode == 0, result.stderr
    assert "tune rc=124" in result.stdout
    assert "tuner left running" not in result.stdout


def test_snapshot_parts_join_in_numeric_order(tmp_path: Path) -> None:
    snapshot = _load_snapshot_module()
    dest = tmp_path / "s.tar.xz"
    payload = bytes(range(256)) * 50  # 12 800 bytes: 13 parts of 1000 (part10 sorts before part2)
    dest.write_bytes(payload)
    assert snapshot.split_parts(dest, 1000) == 13
    assert not dest.exists()
    joined = b"".join((tmp_path / f"s.tar.xz.part{i}").read_bytes() for i in range(13))
    assert joined == payload

    dest.write_bytes(payload[:500])  # a smaller snapshot after: whole, and no stale parts left
    assert snapshot.split_parts(dest, 1000) == 0
    assert dest.read_bytes() == payload[:500]
    assert not list(tmp_path.glob("s.tar.xz.part*"))
