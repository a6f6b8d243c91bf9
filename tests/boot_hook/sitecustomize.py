"""Counts real vLLM server boots for the test suite's summary (tests/boot_log.py puts this folder
first on PYTHONPATH, so every Python process a test starts, at any depth, imports it).

A process started as vLLM's OpenAI server appends one line to $SERVETUNE_TEST_BOOT_LOG: the test
that was running when it started (pytest's PYTEST_CURRENT_TEST, inherited through the tuner, Ray
and vLLM's own launch) and when. Any other process only chains to the sitecustomize it hides.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import time

VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _is_vllm_server(argv: list[str]) -> bool:
    """`python -m vllm.entrypoints.openai.api_server ...` or a `vllm serve ...` script."""
    if VLLM_SERVER_MODULE in argv:
        return True
    return len(argv) > 2 and os.path.basename(argv[1]) == "vllm" and argv[2] == "serve"


def _record(log: str) -> None:
    line = json.dumps({"run": os.environ.get("SERVETUNE_TEST_RUN"), "pid": os.getpid(), "at": time.time(),
                       "test": os.environ.get("PYTEST_CURRENT_TEST", "(outside a test)")})
    with open(log, "a") as f:  # one short append: whole lines from concurrent writers
        f.write(line + "\n")


def _chain() -> None:
    """Run the sitecustomize module this one shadows, if the interpreter has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_log = os.environ.get("SERVETUNE_TEST_BOOT_LOG")
if _log and _is_vllm_server(list(getattr(sys, "orig_argv", sys.argv))):
    _record(_log)
_chain()
