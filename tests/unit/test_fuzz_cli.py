"""Property-based fuzzing of `servetune` arguments: random option values for tune, status, bench,
report and compare either work or end with one line on stderr (exit 2 for bad input, 1 for a bench
run that could not measure), never a traceback; a failed command writes nothing.

No server is started: tune only gets study files that do not load, bench only an unreachable
URL, and the stores are stand-ins.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from cli_fuzz import FUZZ, UNREACHABLE, values
from cli_fuzz import assert_clean as _assert_clean
from cli_run import servetune, tree
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # fast tier: ./scripts/test-fast.sh leaves these out

BENCH_OPTIONS = ["--input-len", "--output-len", "--concurrency", "--rate", "--burstiness", "--num-prompts",
                 "--duration", "--warmups", "--seed", "--endpoint", "--slo", "--percentiles", "--model",
                 "--scenario", "--workers"]


@FUZZ
@given(st.dictionaries(st.sampled_from(BENCH_OPTIONS), values, max_size=4))
def test_bench_options(options: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = ["bench", "--url", UNREACHABLE, "--out", str(Path(tmp) / "res" / "r.json")]
        args += ["--scenario", options.pop("--scenario", "single-decode")]
        for name, value in options.items():
            args += [f"{name}={value}"]
        result = servetune(*args)
        _assert_clean(result, allowed=(1, 2))  # valid options: the unreachable server is a failed run (1)
        assert tree(Path(tmp)) == {}


@FUZZ
@given(out=values, stop_after=st.none() | values, study=st.sampled_from(["missing", "dir", "bad", "binary"]))
def test_tune_options(out: str, stop_after: str | None, study: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "study.yaml"
        if study == "dir":
            path.mkdir()
        elif study == "bad":
            path.write_text("name: x\nengine: {model: m, command: [servetune-test-no-such-engine]}\nscenarios: []\n")
        elif study == "binary":
            path.write_bytes(b"\xff\xfe\x00garbage")
        args = ["tune", str(path), "--out", str(root / "o" / out) if out.strip() and "/" not in out else out]
        if stop_after is not None:
            args += [f"--stop-after={stop_after}"]
        before = tree(root)
        _assert_clean(servetune(*args), allowed=(2,))
        assert tree(root) == before


@FUZZ
@given(command=st.sampled_from(["status", "report", "compare"]), target=values,
       store=st.sampled_from(["none", "junk", "empty", "dir"]), extra=st.none() | values)
def test_store_commands(command: str, target: str, store: str, extra: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        study = root / "study"
        study.mkdir()
        if store == "junk":
            (study / "study.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)
        elif store == "empty":
            (study / "study.sqlite").write_bytes(b"")
        elif store == "dir":
            (study / "study.sqlite").mkdir()
        where = str(study) if target in ("", " ") else target
        args = {"status": ["status", where], "report": ["report", where],
                "compare": ["compare", where, str(study)]}[command]
        if extra is not None:
            args += {"status": [], "report": [f"--out={extra}"],
                     "compare": [f"--confidence={extra}"]}[command]
        before = tree(root)
        _assert_clean(servetune(*args), allowed=(2,))
        assert tree(root) == before
