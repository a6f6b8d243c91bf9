#!/usr/bin/env python
"""Kill campaign: SIGKILL and SIGTERM `servetune tune` at random moments of studies of the
stand-in engine (tests/fakes/standin_engine.py), resume, and check after every kill.

After each kill, before the resume: the store passes `PRAGMA integrity_check`; every run seen
earlier is still there with the same content; no (trial, scenario, replicate, attempt) twice; no
two boots measuring one trial at once (overlapping runs); no orphan process of the stand-in (found
by an environment marker the tuners carry and their servers inherit; after a SIGKILL the one
server the store records as running is left for the resume's recovery, after a SIGTERM that came
before the tuner's recovery ran so is a recorded server its SIGKILLed predecessor left, anything
else is an orphan: helper processes of the tuner included); no held port (a port some server
was launched on, other than that recorded server's).
At the end every study must finish with a verdict, with nothing left. Prints a Markdown table.

    scripts/kill_campaign.py [--kills 50] [--studies 2] [--seed 1] [--secrets] [--out DIR]

`--secrets`: also run a study whose engine env holds HF_TOKEN / VLLM_API_KEY values and search
every file it wrote (and its output) for them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from tests.fakes import standin  # noqa: E402

SIGTERM_WAIT_S = 60  # a tuner must stop this soon after SIGTERM (teardown grace included)
FINISH_TIMEOUT_S = 300
_LAUNCH_PORT = re.compile(r"'--port', '(\d+)'")

# Scenarios of a few seconds: the stand-in waits --fault-delay-ms before each chunk.
SLOW = {"fault": "slow-chunks", "fault-delay-ms": 25}
DECODE = {"name": "decode", "input_len": 32, "output_len": 16, "concurrency": 2, "num_prompts": 8, "warmups": 1}
CHAT = {**DECODE, "name": "chat", "endpoint": "chat", "num_prompts": 6}
# The study that measures the host's memory bandwidth at its start (3-9 s here, and again after
# every kill until it has finished once) gets kill moments that reach past it: else every kill
# would land in the measurement. The others skip it, so their kills land in trials.
BANDWIDTH_EXTRA_DELAY_S = 10.0
STUDIES = [
    {"name": "campaign-grid", "space": {"max-num-seqs": [2, 4, 8]}, "scenarios": [DECODE], "replicates": 2,
     "measure_bandwidth": False},
    {"name": "campaign-two-scenarios", "space": {"enable-prefix-caching": [True, False]},
     "scenarios": [DECODE, CHAT], "replicates": 2, "measure_bandwidth": True},
    {"name": "campaign-crashy", "space": {"fault": ["slow-chunks", "crash-after", "oom"]},
     "scenarios": [DECODE], "replicates": 2, "measure_bandwidth": False},
]


@dataclass
class Figures:
    kills: dict[str, int] = field(default_factory=lambda: {"SIGKILL": 0, "SIGTERM": 0})
    phases: dict[str, int] = field(default_factory=lambda: {"booting": 0, "measuring": 0, "between": 0})
    checks_passed: int = 0
    checks_failed: int = 0
    failures: list[str] = field(default_factory=list)
    orphans: int = 0
    held_ports: int = 0
    left_for_recovery: int = 0  # after SIGTERMs that came before the tuner's recovery ran
    sigterm_too_slow: int = 0
    finished_on_their_own: int = 0
    verdicts: dict[str, str] = field(default_factory=dict)
    final_leftovers: int = 0
    runs_checked: int = 0

    def check(self, name: str, problems: list[str]) -> None:
        if problems:
            self.checks_failed += 1
            self.failures += [f"{name}: {p}" for p in problems]
        else:
            self.checks_passed += 1


def phase(db: Path) -> str:
    """What the tuner is doing now, from its store: a trial booting, one measuring, or neither."""
    if not db.exists():
        return "between"
    conn = standin.read_only(db)
    try:
        row = conn.execute("SELECT healthy_at FROM trials WHERE status != 'done' ORDER BY seq DESC LIMIT 1").fetchone()
    except Exception:  # noqa: BLE001 - no schema yet
        return "between"
    finally:
        conn.close()
    if row is None:
        return "between"
    return "booting" if row[0] is None else "measuring"


def recorded_ports(db: Path, out: Path) -> set[int]:
    """Ports of the servers the store records as running (from their trial logs' launch lines)."""
    conn = standin.read_only(db)
    try:
        logs = [r[0] for r in conn.execute(
            "SELECT log_path FROM trials WHERE status != 'done' AND server_pgid IS NOT NULL AND log_path IS NOT NULL")]
    except Exception:  # noqa: BLE001
        return set()
    finally:
        conn.close()
    ports: set[int] = set()
    for log in logs:
        path = out / log
        if path.is_file():
            found = _LAUNCH_PORT.findall(path.read_text(errors="replace"))
            ports.update(int(p) for p in found[-1:])  # the latest launch into that log
    return ports


def after_kill(fig: Figures, label: str, sig: str, out: Path, mark: str, seen: dict[Any, Any],
               inherited: set[int]) -> None:
    """`inherited`: stand-in pids alive before this tuner started, servers a SIGKILLed predecessor
    left recorded in the store. A SIGKILLed tuner may leave its own recorded server for the next
    recovery; a SIGTERMed one must leave none of its own, but one that was stopped before its
    recovery ran leaves the inherited ones as they were (still recorded, stopped by the next
    recovery; counted apart)."""
    db = out / "study.sqlite"
    fig.check(f"{label} store", standin.store_problems(db, seen))
    alive = standin.standin_processes(mark)
    recorded = standin.recorded_servers(db) if db.exists() else set()
    orphans = []
    for proc in alive:
        try:
            pgid = os.getpgid(proc.pid)
        except ProcessLookupError:
            continue
        if pgid in recorded and (sig == "SIGKILL" or proc.pid in inherited):
            fig.left_for_recovery += sig == "SIGTERM"
            continue
        orphans.append(proc)
    allowed = recorded_ports(db, out) if len(orphans) < len(alive) else set()
    held = [p for p in standin.held_ports(out) if p not in allowed]
    fig.orphans += len(orphans)
    fig.held_ports += len(held)
    problems = [f"orphan pid {p.pid} ({' '.join(p.cmdline()[1:4])})" for p in orphans if p.is_running()]
    problems += [f"port {p} held" for p in held]
    fig.check(f"{label} processes/ports", problems)
    for proc in orphans:  # found and counted: remove, so the next check sees only new ones
        try:
            proc.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass


def campaign_study(fig: Figures, spec: dict[str, Any], kills: int, rng: random.Random, root: Path,
                   max_delay_s: float) -> None:
    """`kills` kills of a study; one that finishes before they are all spent starts over in a new dir."""
    done = 0
    copy = 1
    while done < kills:
        done += killed_instance(fig, spec, f"{spec['name']}-{copy}", kills - done, rng, root, max_delay_s)
        copy += 1


def killed_instance(fig: Figures, spec: dict[str, Any], name: str, kills: int, rng: random.Random, root: Path,
                    max_delay_s: float) -> int:
    """Kill one study up to `kills` times, then resume it to its end and check it; the kills made."""
    mark = standin.new_mark()
    study = root / f"{name}.yaml"
    out = root / name
    trials = len(next(iter(spec["space"].values())))
    study.write_text(standin.study_text(spec["name"], args=SLOW, space=spec["space"], scenarios=spec["scenarios"],
                                        replicates=spec["replicates"], finalists=1, trials=trials,
                                        measure_bandwidth=spec["measure_bandwidth"]))
    latest_kill_s = max_delay_s + (BANDWIDTH_EXTRA_DELAY_S if spec["measure_bandwidth"] else 0.0)
    seen: dict[Any, Any] = {}
    done = 0
    while done < kills:
        inherited = {proc.pid for proc in standin.standin_processes(mark)}
        tuner = standin.start_tuner(study, out, mark, log=root / f"{name}.tuner.log")
        deadline = time.monotonic() + rng.uniform(0.5, latest_kill_s)
        while time.monotonic() < deadline and tuner.poll() is None:
            time.sleep(0.02)
        if tuner.poll() is not None:  # the study ended before this kill
            fig.finished_on_their_own += 1
            break
        sig = rng.choice(["SIGKILL", "SIGTERM"])
        fig.phases[phase(out / "study.sqlite")] += 1
        fig.kills[sig] += 1
        done += 1
        tuner.send_signal(getattr(signal, sig))
        try:
            tuner.wait(SIGTERM_WAIT_S)
        except subprocess.TimeoutExpired:
            fig.sigterm_too_slow += 1
            fig.failures.append(f"{name} kill {done}: the tuner outlived SIGTERM by {SIGTERM_WAIT_S} s")
            os.killpg(tuner.pid, signal.SIGKILL)  # the session start_tuner created
            tuner.wait()
        after_kill(fig, f"{name} kill {done} ({sig})", sig, out, mark, seen, inherited)
    result = standin.run_tuner(study, out, mark, timeout_s=FINISH_TIMEOUT_S)
    _record_verdict(fig, out, name, result.returncode, result.stderr)
    fig.check(f"{name} final store", standin.store_problems(out / "study.sqlite", seen))
    left = standin.standin_processes(mark)
    fig.final_leftovers += len(left)
    fig.check(f"{name} final processes/ports",
              [f"left pid {p.pid}" for p in left] + [f"port {p} held" for p in standin.held_ports(out)])
    fig.runs_checked += len(seen)
    standin.kill_marked(mark)
    return done


def _record_verdict(fig: Figures, out: Path, name: str, rc: int | None, stderr: str = "") -> None:
    conn = standin.read_only(out / "study.sqlite")
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'verdict'").fetchone()
    finally:
        conn.close()
    fig.verdicts[name] = json.loads(row[0])["reason"] if row else f"none (tuner exit {rc})"
    if row is None or rc != 0:
        fig.failures.append(f"{name}: no verdict (exit {rc}) {stderr.strip().splitlines()[-1:] if stderr else ''}")


def secrets_check(root: Path) -> dict[str, Any]:
    """A study whose engine env holds secrets; every file it wrote, and its output, searched for them."""
    secrets = {"HF_TOKEN": "hf_campaign" + os.urandom(12).hex(), "VLLM_API_KEY": "sk-campaign" + os.urandom(12).hex()}
    study = root / "secrets.yaml"
    out = root / "secrets"
    study.write_text(standin.study_text("campaign-secrets", args={"fault": "none"}, space={"max-num-seqs": [4]},
                                        env=secrets, finalists=1))
    mark = standin.new_mark()
    result = standin.run_tuner(study, out, mark, timeout_s=FINISH_TIMEOUT_S, report=True)
    standin.kill_marked(mark)
    leaks: list[str] = []
    files = [p for p in out.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        leaks += [f"{path.relative_to(out)}: {name}" for name, value in secrets.items() if value.encode() in data]
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        leaks += [f"tuner {stream}: {name}" for name, value in secrets.items() if value in text]
    return {"files": len(files), "leaks": leaks, "exit": result.returncode,
            "error": (result.stderr.strip().splitlines() or [""])[-1][:200]}


def table(fig: Figures, wall_s: float, secrets: dict[str, Any] | None, argv: list[str]) -> str:
    rows = [
        ("kills (SIGKILL / SIGTERM)", f"{fig.kills['SIGKILL'] + fig.kills['SIGTERM']} "
                                      f"({fig.kills['SIGKILL']} / {fig.kills['SIGTERM']})"),
        ("kill moments: booting / measuring / between trials",
         f"{fig.phases['booting']} / {fig.phases['measuring']} / {fig.phases['between']}"),
        ("checks passed / failed", f"{fig.checks_passed} / {fig.checks_failed}"),
        ("runs tracked across kills (none lost, changed or duplicated unless listed)", str(fig.runs_checked)),
        ("studies that finished between kills (started over in a new dir)", str(fig.finished_on_their_own)),
        ("orphan processes found after kills", str(fig.orphans)),
        ("held ports found after kills", str(fig.held_ports)),
        ("predecessors' recorded servers a SIGTERMed tuner left for the next recovery (it was stopped "
         "before its recovery ran)", str(fig.left_for_recovery)),
        ("tuners still running 60 s after SIGTERM", str(fig.sigterm_too_slow)),
        ("processes left at the end", str(fig.final_leftovers)),
        ("studies finished with a verdict", f"{sum(not v.startswith('none') for v in fig.verdicts.values())}"
                                            f" of {len(fig.verdicts)}"),
        ("wall time", f"{wall_s / 60:.1f} min"),
    ]
    if secrets is not None:
        rows.append(("secret values found in output files", f"{len(secrets['leaks'])} "
                     f"(in {secrets['files']} files searched)"))
    lines = ["| figure | value |", "| --- | --- |", *[f"| {a} | {b} |" for a, b in rows]]
    if fig.failures:
        lines += ["", f"Failed checks ({len(fig.failures)}):", *[f"- {f}" for f in fig.failures[:40]]]
    if secrets is not None and secrets["leaks"]:
        lines += ["", f"Secret leaks (study exit {secrets['exit']}: {secrets['error']}):",
                  *[f"- {leak}" for leak in secrets["leaks"]]]
    lines += ["", "Verdicts:", *[f"- {k}: {v}" for k, v in fig.verdicts.items()], "",
              f"Reproduce: `{' '.join(shlex.quote(a) for a in ['python', 'scripts/kill_campaign.py', *argv])}`"]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=50, help="kills in all, spread over the studies")
    p.add_argument("--studies", type=int, default=2, choices=range(1, len(STUDIES) + 1))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-delay", type=float, default=7.0, help="latest kill moment after a tuner starts (s)")
    p.add_argument("--secrets", action="store_true", help="also search a study's output for its secrets")
    p.add_argument("--out", type=Path, default=None, help="keep the studies here (default: a temporary dir)")
    args = p.parse_args()
    rng = random.Random(args.seed)
    root = args.out or Path(tempfile.mkdtemp(prefix="kill-campaign-"))
    root.mkdir(parents=True, exist_ok=True)
    fig = Figures()
    started = time.monotonic()
    per_study = [args.kills // args.studies + (i < args.kills % args.studies) for i in range(args.studies)]
    for spec, kills in zip(STUDIES, per_study):
        campaign_study(fig, spec, kills, rng, root, args.max_delay)
    secrets = secrets_check(root) if args.secrets else None
    print(table(fig, time.monotonic() - started, secrets, sys.argv[1:]))
    print(f"\nstudies in {root}")
    ok = not fig.failures and (secrets is None or not secrets["leaks"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
