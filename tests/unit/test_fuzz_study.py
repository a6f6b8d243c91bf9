"""Property-based fuzzing of the study file: every mutation of examples/tiny-cpu.yaml either loads
or fails as ServetuneError lines `FILE:LINE: ...` (a line of the file, a key path where one
applies); never another exception, never pydantic's raw report. Through `servetune tune` the
same inputs give exit code 2, no traceback, and nothing in the --out directory.

Deterministic (derandomize) and modest (max_examples) so it fits the unit suite; no server is
ever started: the engine command cannot run, and `tune` is only invoked on files that do not load.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import servetune
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servetune.errors import ServetuneError
from servetune.study import StudySpec, load_study

pytestmark = pytest.mark.slow  # fast tier: ./scripts/test-fast.sh leaves these out

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
TEXT = EXAMPLE.read_text().replace("command: [python, -m, vllm.entrypoints.openai.api_server]",
                                   "command: [servetune-test-no-such-engine]")
BASE = yaml.safe_load(TEXT)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Values that are wrong in some place: wrong types, bad numbers, markup-like and odd text.
odd_text = st.sampled_from(["", " ", "[/]", "[red]x", "{x}", "%s", "a:b", "-", "\\", "null", "0x1F", "é", "\t", "1e400"])
numbers = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1, 1001, 10**6, -0.0, 1e-300]))
scalars = st.one_of(st.none(), st.booleans(), numbers, odd_text, st.text(max_size=12))
junk = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.one_of(odd_text, st.text(max_size=6)),
                                                                    inner, max_size=3)), max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(BASE)


def _copy(node: Any) -> Any:
    return yaml.safe_load(yaml.safe_dump(node))


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    """The example with 1-3 edits: a value replaced, a key removed, an unknown key added."""
    doc = _copy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            kind = draw(st.sampled_from(["replace", "remove", "add"]))
            if kind == "replace":
                parent[path[-1]] = draw(junk)
            elif kind == "remove":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=8))] = draw(junk)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape: skip this one
    return doc


@st.composite
def broken_texts(draw: st.DrawFn) -> bytes:
    """Text-level damage: cut, spliced junk, random bytes, deep nesting, self-referencing aliases."""
    raw = TEXT.encode()
    kind = draw(st.sampled_from(["cut", "splice", "bytes", "nest", "alias"]))
    if kind == "cut":
        return raw[: draw(st.integers(0, len(raw)))]
    if kind == "splice":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.binary(min_size=1, max_size=8) | st.sampled_from([b":", b"[", b"{", b"\t", b"&a *a",
                                                                                    b"- ", b"\xff", b"\x00"])) + raw[at:]
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "nest":
        depth = draw(st.integers(10, 5000))
        return b"name: x\nspace: " + b"[" * depth + b"1" + b"]" * depth + b"\n"
    return b"name: &n [*n]\n"


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _check_error_lines(message: str, source: str, n_lines: int) -> None:
    assert "validation error for" not in message and "errors.pydantic.dev" not in message, message
    for line in message.splitlines():
        if line.startswith("... and "):
            continue
        m = re.match(rf"{re.escape(source)}:(\d+): \S", line)
        assert m, line
        assert 1 <= int(m.group(1)) <= max(n_lines, 1), line


def _load(data: bytes, folder: Path) -> tuple[StudySpec | None, str | None]:
    path = folder / "study.yaml"
    path.write_bytes(data)
    try:
        return load_study(path), None
    except ServetuneError as exc:
        _check_error_lines(str(exc), str(path), data.count(b"\n") + 1)
        return None, str(exc)


def _tune_fails_cleanly(folder: Path, message: str) -> None:
    out = folder / "out"
    result = servetune("tune", folder / "study.yaml", "--out", out)
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.strip() == "error: " + message.strip()
    assert not out.exists()  # nothing written on a load error


@FUZZ
@given(mutated_documents())
def test_mutated_study_loads_or_names_file_line_and_key(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec, message = _load(_dump(doc), Path(tmp))
        if spec is not None:
            assert spec.replicates.max <= 1000 and all(
                isinstance(s.input_len, int) is False or s.input_len >= 1 for s in spec.scenarios)
            assert all(math.isfinite(v) and v > 0 for s in spec.scenarios for v in spec.objective.slo_for(s.name).values())
            return
        assert message is not None
        # Validation errors carry a key path after the line: "FILE:LINE: key.path: message".
        if isinstance(doc, dict):
            source = re.escape(str(Path(tmp) / "study.yaml"))
            for line in message.splitlines():
                assert re.match(rf"{source}:\d+: \S.*: .+", line) or line.startswith("... and "), line
        _tune_fails_cleanly(Path(tmp), message)


@FUZZ
@given(broken_texts())
def test_broken_study_text_is_one_clean_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _spec, message = _load(data, Path(tmp))
        if message is not None:
            _tune_fails_cleanly(Path(tmp), message)
