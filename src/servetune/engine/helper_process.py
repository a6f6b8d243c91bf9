"""Short helper subprocesses of the tuner (reading the engine's defaults, measuring bandwidth)
that die with it.

Servers are left to the recovery of the next `servetune tune` when the tuner is killed (the
store knows them); a helper is not recorded anywhere, so it must not outlive the process that
waits for its answer. A SIGKILL gives the tuner no chance to stop it, hence Linux's parent-death
signal: the helper is started through a stdlib-only guard that asks the kernel for SIGKILL when
its parent goes, checks that the parent is still the one that started it, and then `exec`s the
real command (the setting survives `exec`; a bare interpreter name is looked up on PATH).
Elsewhere the guard only execs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

_GUARD = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass  # not Linux: the parent's own cleanup is all there is
if os.getppid() != int(sys.argv[1]):
    sys.exit(70)  # the parent died before the guard was in place
os.execvp(sys.argv[2], sys.argv[2:])  # PATH lookup, as subprocess does for a bare name
"""


def bound_to_parent(python: str, argv: Sequence[str]) -> list[str]:
    """`argv` (its first element an executable path) run through `python`'s guard: SIGKILLed
    when this process dies."""
    return [python, "-c", _GUARD, str(os.getpid()), *argv]


def run_helper(python: str, args: Sequence[str], *, timeout_s: float,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python ARGS...` as a helper: output captured as text, no stdin, killed on timeout (raising
    subprocess.TimeoutExpired) or when the tuner dies."""
    return subprocess.run(bound_to_parent(python, [python, *args]), capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL, env=env, check=False)
