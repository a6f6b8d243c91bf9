"""The installed engine's own argument defaults, read before any boot.

An engine's CLI defaults come from its argument parser, which this module asks in a subprocess
of the interpreter the study's engine command runs (with the engine module's probe program:
vLLM's `EngineArgs.add_cli_args`, SGLang's `ServerArgs.add_cli_args`), so the answer is the
installed build's (a CPU and a GPU build differ) and servetune itself never imports an engine.
Many defaults are `None` ("resolved at start-up from the platform and the model"): those are
not known here; the boot log's effective values stand in for them (see `engine.equivalence`).
A docker command, or an interpreter without the engine, gives "unknown".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .gates import KERNEL_MODULES
from .helper_process import run_helper
from .profile import EngineProfile

READ_TIMEOUT_S = 180.0

# The end of every engine's defaults probe, given `parser` (its options' defaults), `flag_parser`
# (every flag its server takes) and `version`: prints the JSON object `read_defaults` parses.
PARSER_REPORT = r"""
out = {}
for action in parser._actions:
    if action.dest == "help" or action.default is argparse.SUPPRESS:
        continue
    try:
        json.dumps(action.default)
    except (TypeError, ValueError):
        continue
    out[action.dest] = action.default
flags = sorted({s[2:] for action in flag_parser._actions for s in action.option_strings if s.startswith("--")})
modules = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
print(json.dumps({"version": version, "defaults": out, "flags": flags, "modules": modules}))
"""



class EngineDefaults(BaseModel):
    """Flag name (`max-num-seqs`) -> the installed engine's default; `None` values are left out."""

    known: bool = False
    source: str = ""  # what was read, or why nothing could be
    values: dict[str, Any] = Field(default_factory=dict)
    # Every long flag the engine's parser takes (`max-num-seqs`, `no-enable-prefix-caching`), so
    # a misspelt flag fails before a boot; empty when not read (older stores, unknown engines).
    flags: list[str] = Field(default_factory=list)
    # Which of the kernel packages some option values need (engine/gates.py) the engine's
    # interpreter has; None when not asked.
    modules: list[str] | None = None
    version: str | None = None  # the engine's version, as its package says
    # How messages name the engine whose defaults these are (its profile's label; stores written
    # before it was kept hold vLLM's)
    label: str = "vLLM"

    def default(self, flag: str) -> Any | None:
        """The engine's default for `flag`, None when it is not known before a boot."""
        return self.values.get(flag)


def in_container(command: list[str]) -> bool:
    """`docker run ... IMAGE` (or podman): the engine sees none of this machine's paths."""
    return bool(command) and Path(command[0]).name in ("docker", "podman")


def engine_interpreter(command: list[str]) -> str | None:
    """The Python interpreter that runs the engine command, None when it is not a local Python."""
    if not command:
        return None
    first = command[0]
    if in_container(command):
        return None
    if first in ("python", "python3"):
        return sys.executable  # the launcher runs a bare python as servetune's own interpreter
    if Path(first).name.startswith("python"):
        return first
    script = shutil.which(first)  # `vllm serve`: the console script's shebang names its Python
    if script is None:
        return None
    try:
        with open(script, "rb") as handle:
            line = handle.readline(4096).decode(errors="replace").strip()
    except OSError:
        return None
    if not line.startswith("#!"):
        return None
    words = line[2:].split()
    if words and Path(words[0]).name == "env":
        words = words[1:]
    return words[0] if words and Path(words[0]).name.startswith("python") else None


def runs_package(command: list[str], package: str) -> bool:
    """`vllm serve ...` or `python -m vllm.…` (`package` vllm): only then are that package's
    parser defaults this engine's."""
    if command and Path(command[0]).name == package:
        return True
    return any(word == "-m" and nxt.split(".")[0] == package for word, nxt in zip(command, command[1:]))


def read_engine_defaults(command: list[str], profile: EngineProfile, probe: str, *,
                         timeout_s: float = READ_TIMEOUT_S) -> EngineDefaults:
    """Ask the engine command's interpreter for the argument defaults of the engine `profile`
    describes (one subprocess, ~10 s): `probe`, the engine module's program, prints them as JSON
    (its end is PARSER_REPORT)."""
    package, label = profile.package, profile.label

    def unknown(why: str) -> EngineDefaults:
        return EngineDefaults(label=label, source=f"unknown: {why}")

    if in_container(command):
        return unknown("the engine runs in a container, its defaults are not read")
    if not runs_package(command, package):
        return unknown(f"the engine command does not run {label}'s own entry point")
    python = engine_interpreter(command)
    if python is None:
        return unknown(f"no Python interpreter found for {command[0] if command else '?'!r}")
    try:
        done = run_helper(python, ["-c", probe, *KERNEL_MODULES], timeout_s=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return unknown(f"reading {label}'s defaults with {python} failed ({exc})")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return unknown(f"{python} could not read {label}'s defaults ({last[:200]})")
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return unknown(f"{python} answered something other than JSON")
    values = {dest.replace("_", "-"): v for dest, v in answer.get("defaults", {}).items() if v is not None}
    flags = [f for f in answer.get("flags", []) if isinstance(f, str)]
    modules = [m for m in answer.get("modules", []) if isinstance(m, str)]
    version = answer.get("version")
    return EngineDefaults(known=True, label=label, source=f"{label} {version} argument defaults ({python})",
                          values=values, flags=flags, modules=modules,
                          version=str(version) if version is not None else None)
