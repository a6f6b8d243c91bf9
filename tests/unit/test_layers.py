"""Which package may import which (README's architecture table): the measuring layers (load/,
capacity/, drift/) speak of outcomes and metric names through servetune/vocabulary.py and import
nothing of engine/; no layer imports one above it (tune/ nothing of probe/, engine/ nothing of
what drives it); analysis/ concludes from the store between tune/ (which runs a study) and report/
(which shows the conclusions): it imports neither, and report/ nothing of tune/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servetune"
# package -> the packages its modules must not import
FORBIDDEN = {
    "load": {"engine"},
    "capacity": {"engine"},
    "drift": {"engine"},
    "tune": {"probe", "cli", "report"},
    "analysis": {"tune", "report", "cli", "probe", "ab", "sizing"},
    "report": {"tune", "cli"},
    "probe": {"report"},
    "sizing": {"cli", "search", "probe", "drift", "ab"},
    "engine": {"tune", "probe", "search", "load", "capacity", "drift", "report", "cli", "ab", "analysis"},
}


def _imported_packages(module: Path) -> set[str]:
    """The servetune packages a module imports by name (relative or absolute), lazy imports included."""
    package = module.relative_to(SRC).parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
            elif (node.module or "").startswith("servetune."):
                parts = node.module.split(".")[1:]  # type: ignore[union-attr]
            else:
                continue
            found.add(parts[0] if parts else "")
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("servetune.")}
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_a_package_it_must_not(package: str) -> None:
    wrong = {str(m.relative_to(SRC)): sorted(_imported_packages(m) & FORBIDDEN[package])
             for m in sorted((SRC / package).rglob("*.py"))}
    assert {m: p for m, p in wrong.items() if p} == {}


@pytest.mark.slow
@pytest.mark.parametrize("package", ["load", "capacity"])
def test_a_measuring_layer_loads_without_the_engine_layer(package: str) -> None:
    """Imported in a fresh interpreter, every module of the package: no servetune.engine module
    comes along (through a package's __init__ either)."""
    code = (f"import importlib, pkgutil, sys, servetune.{package} as p\n"
            "for m in pkgutil.iter_modules(p.__path__): importlib.import_module(p.__name__ + '.' + m.name)\n"
            "print(sorted(n for n in sys.modules if n.startswith('servetune.engine')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
