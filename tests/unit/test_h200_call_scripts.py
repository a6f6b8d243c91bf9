"""The H200 call scripts' own logic, with a stand-in tuner: a detached tuner outlives its call and
the next call attaches to it instead of starting another; a large snapshot comes back in parts
that join, in numeric order, to the archive."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
STUDY_CALL = ROOT / "scripts" / "h200" / "study_call.sh"

# Writes one run file a second; on SIGINT says so and exits as the real tuner does.
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


@pytest.fixture
def call_env(tmp_path: Path) -> dict[str, object]:
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
    yield {"env": env, "study": study, "name": name, "out": out}
    pid_file = Path(f"/tmp/st-runs/{name}.tuner.pid")
    if pid_file.exists():  # the session of the tuner this test started, should an assert have failed first
        _interrupt_session(int(pid_file.read_text().strip()))
    subprocess.run(["rm", "-rf", f"/tmp/st-runs/{name}", f"/tmp/st-runs/{name}.tuner.pid",
                    f"/tmp/st-runs/{name}.tuner.rc", f"/tmp/st-runs/tune-{name}.log"], check=False)


def _call(call_env: dict[str, object], seconds: int, detach: int | None) -> subprocess.CompletedProcess[str]:
    env = dict(call_env["env"])  # type: ignore[arg-type]
    if detach is not None:
        env["DETACH"] = str(detach)
    seed = Path(str(call_env["out"])).parent / f"{call_env['name']}.tar.xz"
    return subprocess.run(["bash", str(STUDY_CALL), str(call_env["study"]), str(seed), str(seconds)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_detached_tuner_outlives_its_call_and_the_next_call_attaches(call_env: dict[str, object]) -> None:
    first = _call(call_env, seconds=3, detach=9)
    assert first.returncode == 0, first.stderr
    assert "tuner left running" in first.stdout
    pid = Path(f"/tmp/st-runs/{call_env['name']}.tuner.pid").read_text().strip()
    os.kill(int(pid), 0)  # still alive after the call returned

    second = _call(call_env, seconds=30, detach=9)
    assert second.returncode == 0, second.stderr
    assert f"attaching to the tuner still running (pid {pid})" in second.stdout
    assert "tune rc=124" in second.stdout  # stopped by its own 9-s limit, inside this call
    log = (Path(str(call_env["out"])) / f"tune-{call_env['name']}.log").read_text()
    assert "tuner stopped by SIGINT" in log
    assert "tuner started" not in log  # only what it printed during the second call
    with tarfile.open(Path(str(call_env["out"])) / f"{call_env['name']}.tar.xz") as tar:
        names = tar.getnames()
    assert f"{call_env['name']}/study.sqlite" in names
    assert sum(n.endswith(".json") for n in names) >= 10  # one tuner, runs of both calls


def test_without_detach_the_call_stops_its_tuner(call_env: dict[str, object]) -> None:
    result = _call(call_env, seconds=2, detach=None)
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
