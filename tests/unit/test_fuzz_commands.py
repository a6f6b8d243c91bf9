"""Property-based fuzzing of every command besides `tune` (test_fuzz_study.py is the model): random
option values, URLs, paths and damaged inputs either work or end with one `error:` line and the
contract's exit code (2: bad input, found before any measurement or boot; 1: ran, no result),
never a traceback, and nothing the user had is changed.

Fast tier: no server is ever reached (the only valid URL refuses at once), no engine can start
(the base command does not exist), and each case runs in-process in milliseconds.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import tempfile
from pathlib import Path

from cli_fuzz import UNREACHABLE, assert_clean, bad_urls, edge_numbers, values
from cli_run import servetune, tree
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from report_study import build_study

from servetune.vocabulary import Outcome

# No shrinking: a failing case is reported as found (shrinking one in-process CLI run can take minutes).
FAST = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate])
NO_ENGINE = "servetune-test-no-such-engine"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
NO_ENGINE_STUDY = EXAMPLE.read_text().replace("command: [python, -m, vllm.entrypoints.openai.api_server]",
                                              f"command: [{NO_ENGINE}]")
option_values = st.one_of(edge_numbers, values)


def _options(names: list[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(names), option_values, max_size=3)


def _args(options: dict[str, str]) -> list[str]:
    return [f"{name}={value}" for name, value in options.items()]


def _measuring_command(command: list[str], url: str, options: dict[str, str], out_exists: bool) -> None:
    """bench, capacity, drift: only the refusing URL can pass, so any case ends 1 or 2; with a bad
    URL or an --out that exists, 2; and no file but the one that was there is left."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out = root / "res" / "r.json"
        if out_exists:
            out.parent.mkdir()
            out.write_text("earlier result\n")
        before = tree(root)
        result = servetune(*command, f"--url={url}", "--out", out, *_args(options))
        assert_clean(result, allowed=(1, 2))
        if url != UNREACHABLE or out_exists:
            assert result.code == 2, result
        assert tree(root) == before


BENCH = ["--input-len", "--output-len", "--concurrency", "--rate", "--burstiness", "--num-prompts", "--duration",
         "--warmups", "--seed", "--slo", "--workers", "--stall-timeout", "--run-timeout", "--connect-timeout",
         "--first-byte-timeout", "--percentiles"]


@FAST
@given(url=bad_urls, options=_options(BENCH), out_exists=st.booleans())
def test_bench(url: str, options: dict[str, str], out_exists: bool) -> None:
    _measuring_command(["bench", "--scenario", "single-decode"], url, options, out_exists)


CAPACITY = ["--load", "--start", "--max-level", "--num-prompts", "--input-len", "--output-len", "--burstiness",
            "--seed", "--alpha", "--rel-tol", "--max-levels", "--stall-timeout", "--connect-timeout"]


@FAST
@given(url=bad_urls, options=_options(CAPACITY), out_exists=st.booleans())
def test_capacity(url: str, options: dict[str, str], out_exists: bool) -> None:
    _measuring_command(["capacity", "--scenario", "chat-bursty", "--slo", "ttft:p50=1000"], url, options,
                       out_exists)


DRIFT = ["--short-per-phase", "--long-requests", "--short-input-len", "--short-output-len", "--long-input-len",
         "--long-output-len", "--warmups", "--seed", "--alpha", "--min-effect-pct", "--stall-timeout"]


@FAST
@given(url=bad_urls, options=_options(DRIFT), out_exists=st.booleans())
def test_drift(url: str, options: dict[str, str], out_exists: bool) -> None:
    _measuring_command(["drift"], url, options, out_exists)


# Base commands that never name a runnable program: the missing one (with random arguments), or
# text that is no command at all (empty, an unbalanced quote).
commands = st.one_of(st.sampled_from(["", " ", 'python "unclosed', "'", NO_ENGINE]),
                     values.map(lambda v: f"{NO_ENGINE} {v}"))


def _runnable(command: str) -> bool:
    try:
        return bool(shlex.split(command))
    except ValueError:
        return False


@FAST
@given(options=_options(["--start", "--tolerance", "--max-boots", "--startup-timeout"]), command=commands)
def test_probe_context(options: dict[str, str], command: str) -> None:
    # Valid options end at a boot that cannot start (exit 1); a command that is none is bad input (2).
    with tempfile.TemporaryDirectory() as tmp:
        result = servetune("probe", "context", "--model", tmp, "--log-dir", Path(tmp) / "logs", "--command", command,
                           *_args(options))
        assert_clean(result, allowed=(1, 2))
        if not _runnable(command):
            assert result.code == 2, result


@FAST
@given(options=_options(["--startup-timeout", "--device-memory-gib", "--scenario"]), command=commands)
def test_probe_memory(options: dict[str, str], command: str) -> None:
    options.setdefault("--scenario", "single-decode")
    with tempfile.TemporaryDirectory() as tmp:
        result = servetune("probe", "memory", "--model", tmp, "--out", Path(tmp) / "probe", "--command", command,
                           *_args(options))
        assert_clean(result, allowed=(1, 2))
        if not _runnable(command):
            assert result.code == 2, result
        assert not (Path(tmp) / "probe" / "memory.json").exists()


@FAST
@given(preset=st.one_of(st.just("tiny"), values), held=st.sampled_from(["config.json", "weights.bin", "notes"]))
def test_model_make_never_writes_into_a_directory_that_holds_files(preset: str, held: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / held).write_text("the user's\n")
        before = tree(Path(tmp))
        assert_clean(servetune("model", "make", preset, tmp), allowed=(2,))
        assert tree(Path(tmp)) == before


# --- compare: sides that failed or differ ------------------------------------------------------------

side_docs = st.fixed_dictionaries({
    "outcome": st.one_of(st.none(), st.sampled_from([o.value for o in Outcome]), values),
    "completed": st.one_of(st.integers(0, 3), st.none()),
    "input_len": st.sampled_from([16, 512]), "concurrency": st.sampled_from([1, 8]),
    "endpoint": st.sampled_from(["completions", "chat"]),
})


def _bench_json(path: Path, side: dict) -> Path:
    doc = {"output_throughput": 10.0, "mean_ttft_ms": 5.0,
           "scenario": {"name": "s", "input_len": side["input_len"], "output_len": 8,
                        "concurrency": side["concurrency"], "endpoint": side["endpoint"]}}
    doc.update({k: side[k] for k in ("outcome", "completed") if side[k] is not None})
    path.write_text(json.dumps(doc))
    return path


@FAST
@given(a=side_docs, b=side_docs, anyway=st.booleans())
def test_compare_refuses_failed_or_different_sides_unless_anyway(a: dict, b: dict, anyway: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb = _bench_json(Path(tmp) / "a.json", a), _bench_json(Path(tmp) / "b.json", b)
        result = servetune("compare", pa, pb, *(["--anyway"] if anyway else []))
        assert_clean(result, allowed=(0, 2))
        failed = any(s["outcome"] not in (None, "ok", "client_bound") or s["completed"] == 0 for s in (a, b))
        differ = any(a[k] != b[k] for k in ("input_len", "concurrency", "endpoint"))
        if (failed or differ) and not anyway:
            assert result.code == 2 and "not comparable" in result.stderr, result
        else:
            assert result.code == 0, result
            assert ("not comparable:" in result.stdout) == (failed or differ), result  # the caption's reason


# --- status, report, compare on a store with one damaged row -------------------------------------

DAMAGE = {"trials": ["config_json", "params_json", "outcome", "role", "status", "boot_facts_json"],
          "runs": ["outcome", "summary_json", "server_stats_json", "client_health_json"]}
column = st.sampled_from([(table, col) for table, cols in DAMAGE.items() for col in cols])
junk = st.one_of(values, st.sampled_from(["{", "[]", "null", '{"flags": 1}', "not-an-outcome", '"x"', "{}"]))


@settings(FAST, max_examples=12)
@given(where=column, value=junk, command=st.sampled_from(["status", "report", "compare"]))
def test_a_damaged_store_row_is_one_line(where: tuple[str, str], value: str, command: str) -> None:
    table, col = where
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study"
        store, _ = build_study(study)
        store.close()
        with sqlite3.connect(study / "study.sqlite") as conn:
            conn.execute(f"UPDATE {table} SET {col} = ? WHERE id = (SELECT MIN(id) FROM {table})", (value,))
        conn.close()
        before = (study / "study.sqlite").read_bytes()
        args = {"status": [study], "report": [study, "--out", Path(tmp) / "rep"], "compare": [study, study]}
        assert_clean(servetune(command, *args[command]), allowed=(0, 2))
        assert (study / "study.sqlite").read_bytes() == before


# --- tune: --stop-after -----------------------------------------------------------------------------

@FAST
@given(stop_after=st.sampled_from(["-5", "0", "-0", "nan", "inf", "-inf", "1e20", "1e400"]))
def test_tune_refuses_a_stop_after_that_is_no_duration(stop_after: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study.yaml"
        study.write_text(NO_ENGINE_STUDY)
        result = servetune("tune", study, "--out", Path(tmp) / "o", f"--stop-after={stop_after}")
        assert_clean(result, allowed=(2,))
        assert "--stop-after" in result.stderr
        assert not (Path(tmp) / "o").exists()


# --- ab: option values, and a directory that holds a tuning study -----------------------------------

@settings(FAST, max_examples=8)
@given(options=_options(["--boots", "--prefix-reuse-len", "--prefix-reuse-pairs", "--metric"]),
       into_study=st.booleans())
def test_ab(options: dict[str, str], into_study: bool) -> None:
    # Valid options end at the start's check of the missing engine (exit 2, nothing boots: one line, as
    # both sides share the file's engine command); a tuning study's directory is refused (2).
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ab.yaml").write_text(NO_ENGINE_STUDY + "ab: {A: {}, B: {}}\n")
        out = root / "out"
        if into_study:
            build_study(out)[0].close()
        store = out / "study.sqlite"
        before = store.read_bytes() if into_study else None
        result = servetune("ab", root / "ab.yaml", "--out", out, *_args(options))
        assert_clean(result, allowed=(2,))
        if into_study:  # (reading a store may leave SQLite's -shm beside it: the store itself is unchanged)
            assert result.code == 2 and store.read_bytes() == before, result
