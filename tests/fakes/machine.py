"""Fake GPUs for the machine tests: the fake NVML (tests/fakes/nvml/pynvml.py) in this process or
in a tuner subprocess, and a fake `nvidia-smi` script on PATH."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from servetune.machine import nvml

NVML_DIR = Path(__file__).with_name("nvml")

H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1111aaaa", "power_limit_mw": 700_000, "app_sm": 1980,
        "app_mem": 2619, "max_sm": 1980, "max_mem": 2619, "persistence": 1, "ecc": 1, "temp": 34,
        "mem_used": 512 * 2**20, "mem_total": 80 * 2**30, "processes": [], "power_mw": 350_000, "util": 90,
        "mem_util": 60, "sm_clock": 1980, "mem_clock": 2619, "reasons": 0}


def nvml_state(gpus: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"driver": "550.54.15", "cuda": 12040, "gpus": gpus or [dict(H100)], **extra}


def write_state(path: Path, state: dict[str, Any]) -> Path:
    path.write_text(json.dumps(state))
    return path


def install_fake_nvml(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> ModuleType:
    """The fake as `pynvml` in this process, NVML's cached module forgotten."""
    spec = importlib.util.spec_from_file_location("pynvml", NVML_DIR / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FAKE_NVML_STATE", str(state_file))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(nvml, "_initialised", None)
    return module


def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import pynvml` fails here (a host without nvidia-ml-py)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # type: ignore[arg-type]
    monkeypatch.setattr(nvml, "_initialised", None)


def install_fake_smi(monkeypatch: pytest.MonkeyPatch, bin_dir: Path, answers: dict[str, str]) -> Path:
    """A `nvidia-smi` first on PATH that prints answers[key] for the first key found in its arguments."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\nANSWERS = {answers!r}\n"
                      "args = ' '.join(sys.argv[1:])\n"
                      "for key, text in ANSWERS.items():\n"
                      "    if key in args:\n"
                      "        print(text)\n"
                      "        sys.exit(0)\n"
                      "sys.exit(9)\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return script
