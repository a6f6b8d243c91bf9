"""Studies of the stand-in engine run as `servetune tune` subprocesses, and what is checked after
them: the store's integrity and runs, processes of the stand-in left alive, ports left held.

Every tuner started here carries an environment marker (MARK=<uuid>) that its servers and their
children inherit, so leftovers are found by that marker alone: never a process someone else
started. Shared by the fault-injection suite (tests/faults/) and scripts/kill_campaign.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from servetune.engine.launch import processes_with_env
from servetune.engine.ports import port_is_free
from tests.fakes import MODEL_WITHOUT_WEIGHTS

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).with_name("standin_engine.py")
MARK = "SERVETUNE_STANDIN_MARK"
TINY_SCENARIO = {"name": "tiny", "input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 6,
                 "warmups": 1}
_LAUNCH_PORT = re.compile(r"^# servetune launch: .*'--port', '(\d+)'", re.M)


def study_text(name: str, *, args: dict[str, Any] | None = None, space: dict[str, Any] | None = None,
               env: dict[str, str] | None = None, scenarios: list[dict[str, Any]] | None = None,
               replicates: int = 1, trials: int = 4, startup_timeout_s: float = 20, finalists: int = 0,
               measure_bandwidth: bool = True) -> str:
    """A study file of the stand-in (JSON, which YAML reads as it is): a grid over `space`."""
    spec = {
        "name": name,
        "engine": {"command": ["python", str(STANDIN)], "model": str(MODEL_WITHOUT_WEIGHTS),
                   "args": args or {}, "env": env or {}, "startup_timeout_s": startup_timeout_s},
        "space": space or {},
        "scenarios": scenarios or [TINY_SCENARIO],
        "objective": {"maximize": "output_throughput"},
        "strategy": "grid",
        "replicates": replicates,
        "finalists": finalists,
        "budget": {"trials": trials},
        "measure_bandwidth": measure_bandwidth,
    }
    return json.dumps(spec, indent=1) + "\n"


def new_mark() -> str:
    return uuid.uuid4().hex


def tuner_env(mark: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    src = str(REPO / "src")
    path = os.pathsep.join([src, str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, MARK: mark, **(extra or {})}


def tune_argv(study: Path, out: Path, report: bool, extra_args: list[str] | None = None) -> list[str]:
    return [sys.executable, "-m", "servetune", "tune", str(study), "--out", str(out),
            "--report" if report else "--no-report", *(extra_args or [])]


def start_tuner(study: Path, out: Path, mark: str, *, extra_env: dict[str, str] | None = None,
                preexec_fn: Callable[[], None] | None = None, log: Path | None = None,
                report: bool = False, extra_args: list[str] | None = None) -> subprocess.Popen[bytes]:
    """`servetune tune STUDY --out OUT [--no-report]` in a session of its own, marked; its output goes
    to `log` (appended) or nowhere (never to a pipe nobody reads: a full pipe would stall it)."""
    sink = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(
            tune_argv(study, out, report, extra_args),
            cwd=REPO, env=tuner_env(mark, extra_env), stdin=subprocess.DEVNULL, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec_fn)
    finally:
        if log is not None:
            sink.close()  # type: ignore[union-attr]


@dataclass
class TunerResult:
    returncode: int | None  # None: it did not finish within the timeout and was killed
    stdout: str
    stderr: str


def run_tuner(study: Path, out: Path, mark: str, *, timeout_s: float, extra_env: dict[str, str] | None = None,
              preexec_fn: Callable[[], None] | None = None, report: bool = False,
              extra_args: list[str] | None = None) -> TunerResult:
    """Run a tuner to its end; one that outlives `timeout_s` is killed with its group."""
    proc = subprocess.Popen(
        tune_argv(study, out, report, extra_args),
        cwd=REPO, env=tuner_env(mark, extra_env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=preexec_fn)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        return TunerResult(proc.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this function created
        stdout, stderr = proc.communicate()
        return TunerResult(None, stdout, stderr)


def marked_processes(mark: str) -> list[psutil.Process]:
    """Live processes that carry MARK=mark in their environment (tuners and stand-ins alike)."""
    return processes_with_env(MARK, mark)


def standin_processes(mark: str) -> list[psutil.Process]:
    """Marked processes that are not a tuner: servers of the stand-in and what they spawned."""
    out = []
    for proc in marked_processes(mark):
        try:
            if "servetune" not in proc.cmdline()[1:4]:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def kill_marked(mark: str) -> int:
    """SIGKILL every process with our marker (a test's own leftovers); how many there were."""
    procs = marked_processes(mark)
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


def launched_ports(out: Path) -> set[int]:
    """Every port a server of the study was launched on (from the launch line of each trial log)."""
    ports: set[int] = set()
    for log in (out / "logs").glob("*.log"):
        ports.update(int(p) for p in _LAUNCH_PORT.findall(log.read_text(errors="replace")))
    return ports


def held_ports(out: Path) -> list[int]:
    return sorted(p for p in launched_ports(out) if not port_is_free(p))


# --- the store --------------------------------------------------------------------------------

RunKey = tuple[int, str, int, int]  # trial seq, scenario, replicate, attempt


def read_only(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def integrity(db: Path) -> str:
    conn = read_only(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def stored_runs(db: Path) -> dict[RunKey, tuple[Any, ...]]:
    """Every stored run by (trial seq, scenario, replicate, attempt) with the content it was stored with."""
    conn = read_only(db)
    try:
        rows = conn.execute(
            "SELECT t.seq, r.scenario, r.replicate, r.attempt, r.outcome, r.summary_json, r.records_path,"
            " r.started_at, r.ended_at FROM runs r JOIN trials t ON r.trial_id = t.id").fetchall()
    except sqlite3.OperationalError:  # no schema yet: killed before the store was created
        return {}
    finally:
        conn.close()
    return {(r[0], r[1], r[2], r[3]): tuple(r[4:]) for r in rows}


def store_problems(db: Path, seen: dict[RunKey, tuple[Any, ...]]) -> list[str]:
    """What is wrong with the store now, given the runs seen in it earlier (`seen` is updated):
    integrity, a run lost or changed, a duplicate run key, two boots measuring one trial at once."""
    if not db.exists():
        return [] if not seen else [f"{db} vanished with {len(seen)} runs"]
    problems = []
    check = integrity(db)
    if check != "ok":
        problems.append(f"integrity_check: {check}")
    now = stored_runs(db)
    for key, content in seen.items():
        if key not in now:
            problems.append(f"run {key} lost")
        elif now[key] != content:
            problems.append(f"run {key} changed")
    conn = read_only(db)
    try:
        dupes = conn.execute("SELECT trial_id, scenario, replicate, attempt, COUNT(*) FROM runs"
                             " GROUP BY 1, 2, 3, 4 HAVING COUNT(*) > 1").fetchall()
        problems += [f"duplicate run {tuple(d)[:4]} x{d[4]}" for d in dupes]
    except sqlite3.OperationalError:
        pass
    finally:
        conn.close()
    problems += overlapping_runs(now)
    seen.update(now)
    return problems


def overlapping_runs(runs: dict[RunKey, tuple[Any, ...]]) -> list[str]:
    """Runs of one trial measured at the same time: two boots (two tuners) under one trial."""
    by_trial: dict[int, list[tuple[float, float, RunKey]]] = {}
    for key, content in runs.items():
        by_trial.setdefault(key[0], []).append((content[3], content[4], key))
    out = []
    for spans in by_trial.values():
        spans.sort()
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            if start < end:
                out.append(f"runs {a} and {b} of one trial overlap in time")
    return out


def recorded_servers(db: Path) -> set[int]:
    """Process groups of servers the store says are running (a killed tuner's, left for recovery)."""
    conn = read_only(db)
    try:
        rows = conn.execute("SELECT server_pgid FROM trials WHERE status != 'done' AND server_pgid IS NOT NULL")
        return {int(r[0]) for r in rows}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def wait_gone(mark: str, timeout_s: float) -> list[psutil.Process]:
    """The stand-in processes still alive after up to `timeout_s` (teardown may be finishing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = standin_processes(mark)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)
