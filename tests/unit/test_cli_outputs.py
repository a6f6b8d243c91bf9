"""The file contract of every command (docs/guides/cli-contract.md), walked over the typer app so
that a command added later cannot escape it: every path a command takes is declared here as an
input or an output, and every output is tried as a new user would get it wrong:

- a name that already exists: refused without --force (a directory output: a file in its place),
  and the file is left as it was;
- the command's own input: refused even with --force, and the input is left as it was;
- a name whose ending promises another format (JSON lines under `.csv`): refused, nothing written.

No server is started: each case must end with exit 2 before any work."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from cli_run import assert_one_line_error, servetune, tree

from servetune.cli import app

UNREACHABLE = "http://127.0.0.1:9"
ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake-excerpt.jsonl"
NO_ENGINE = "servetune-test-no-such-engine"
NO_ENGINE_STUDY = (ROOT / "examples" / "tiny-cpu.yaml").read_text().replace(
    "command: [python, -m, vllm.entrypoints.openai.api_server]", f"command: [{NO_ENGINE}]")
# A name whose ending promises another format than the one written.
WRONG_ENDING = {"JSON": ".csv", "JSON lines": ".csv", "Markdown": ".json", "PNG": ".json", "YAML": ".json"}


@dataclass(frozen=True)
class Scratch:
    """What a command reads, made fresh for each case in tmp_path."""

    root: Path

    @property
    def trace(self) -> Path:
        return self._copy(TRACE, "trace.jsonl")

    @property
    def study(self) -> Path:
        path = self.root / "study.yaml"
        if not path.exists():
            path.write_text(NO_ENGINE_STUDY)
        return path

    @property
    def study_b(self) -> Path:
        return self._text("study-b.yaml", self.study.read_text())

    @property
    def bench_a(self) -> Path:
        return self._text("a.json", "{}\n")

    @property
    def bench_b(self) -> Path:
        return self._text("b.json", "{}\n")

    @property
    def requests(self) -> Path:
        return self._text("requests.jsonl", '{"input_len": 100, "output_len": 20}\n' * 3)

    @property
    def model(self) -> Path:
        path = self.root / "model"
        path.mkdir(exist_ok=True)
        return path

    @property
    def study_dir(self) -> Path:
        path = self.root / "studydir"
        path.mkdir(exist_ok=True)
        return path

    def _copy(self, source: Path, name: str) -> Path:
        path = self.root / name
        if not path.exists():
            shutil.copy(source, path)
        return path

    def _text(self, name: str, text: str) -> Path:
        path = self.root / name
        if not path.exists():
            path.write_text(text)
        return path


Args = Callable[[Scratch, Path], list[str | Path]]


@dataclass(frozen=True)
class Output:
    """One output of one command: how to call the command with OUT there, what it writes (a format
    name of cli/paths.FORMAT_OF_SUFFIX, or "directory"), its usual ending, and which of its inputs
    OUT may not be (None: it has none, or writing into it is the command's job, as `report`)."""

    args: Args
    writes: str
    ending: str = ""
    own_input: Callable[[Scratch], Path] | None = None


def _probe(s: Scratch) -> list[str | Path]:
    return ["--model", s.model, "--command", NO_ENGINE]


# Every output of every command. A command that gains a path option must be added here or to INPUTS.
OUTPUTS: dict[tuple[str, str], Output] = {
    ("bench", "out"): Output(lambda s, o: ["bench", "--url", UNREACHABLE, "--trace", s.trace, "--out", o],
                             "JSON", ".json", lambda s: s.trace),
    ("capacity", "out"): Output(lambda s, o: ["capacity", "--url", UNREACHABLE, "--trace", s.trace, "--slo",
                                              "ttft:p50=100", "--out", o], "JSON", ".json", lambda s: s.trace),
    ("soak", "out"): Output(lambda s, o: ["soak", "--url", UNREACHABLE, "--scenario", "chat", "--duration", "1m",
                                          "--out", o], "JSON", ".json"),
    ("drift", "out"): Output(lambda s, o: ["drift", "--url", UNREACHABLE, "--out", o], "JSON", ".json"),
    ("probe context", "out"): Output(lambda s, o: ["probe", "context", *_probe(s), "--log-dir", s.root / "logs",
                                                   "--out", o], "JSON", ".json"),
    ("probe context", "log_dir"): Output(lambda s, o: ["probe", "context", *_probe(s), "--log-dir", o], "directory"),
    ("probe memory", "out"): Output(lambda s, o: ["probe", "memory", *_probe(s), "--scenario", "single-decode",
                                                  "--out", o], "directory"),
    ("probe utilization", "out"): Output(lambda s, o: ["probe", "utilization", *_probe(s), "--log-dir",
                                                      s.root / "logs", "--out", o], "JSON", ".json"),
    ("probe utilization", "log_dir"): Output(lambda s, o: ["probe", "utilization", *_probe(s), "--log-dir", o],
                                             "directory"),
    ("size", "out"): Output(lambda s, o: ["size", s.trace, "--rate", "1", "--out", o], "JSON", ".json",
                            lambda s: s.trace),
    ("compare", "markdown_file"): Output(lambda s, o: ["compare", s.bench_a, s.bench_b, "--markdown", o],
                                         "Markdown", ".md", lambda s: s.bench_a),
    ("init", "study_file"): Output(lambda s, o: ["init", o, "--model", s.model, "--gpus", "0", "--offline",
                                                 "--workload", s.requests], "YAML", ".yaml", lambda s: s.requests),
    ("model make", "out_dir"): Output(lambda s, o: ["model", "make", "tiny", o], "directory"),
    ("serve", "log_dir"): Output(lambda s, o: ["serve", *_probe(s), "--log-dir", o], "directory"),
    ("tune", "out"): Output(lambda s, o: ["tune", s.study, "--out", o], "directory", own_input=lambda s: s.study),
    ("ab", "out"): Output(lambda s, o: ["ab", s.study, s.study_b, "--out", o], "directory", own_input=lambda s: s.study),
    ("ab", "explain"): Output(lambda s, o: ["ab", s.study, s.study_b, "--out", s.root / "ab", "--explain", o],
                              "YAML", ".yaml", lambda s: s.study),
    ("report", "out"): Output(lambda s, o: ["report", s.study_dir, "--out", o], "directory"),
    ("pareto", "plot"): Output(lambda s, o: ["pareto", s.study_dir, "--x", "p99_ttft_ms", "--y", "output_throughput",
                                             "--plot", o], "PNG", ".png"),
    ("trace summary", "plot"): Output(lambda s, o: ["trace", "summary", s.trace, "--plot", o], "PNG", ".png",
                                      lambda s: s.trace),
    ("trace cut", "out"): Output(lambda s, o: ["trace", "cut", s.trace, "--out", o], "JSON lines", ".jsonl",
                                 lambda s: s.trace),
}
# Paths the commands only read (`status DIR` reads the study directory it is given).
INPUTS = {
    ("tune", "study_file"), ("status", "out"), ("report", "study_dir"), ("pareto", "study_dir"), ("compare", "a"), ("compare", "b"),
    ("bench", "trace"), ("bench", "serve"), ("bench", "tokenizer"), ("capacity", "trace"), ("capacity", "serve"),
    ("capacity", "tokenizer"), ("drift", "serve"), ("drift", "tokenizer"), ("ab", "study_files"),
    ("plan", "study_file"), ("probe memory", "study"), ("trace summary", "path"), ("trace cut", "path"),
    ("size", "source"), ("size", "trace"), ("size", "tokenizer"),
    ("soak", "study"), ("soak", "tokenizer"), ("soak", "server_log"),
}


def commands() -> dict[str, list[typer.core.TyperArgument | typer.core.TyperOption]]:
    """Every leaf command of the app by its words ("trace cut"), with its parameters."""
    found: dict[str, list] = {}

    def walk(command: object, words: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is not None:
            for name, sub in subcommands.items():
                walk(sub, [*words, name])
        else:
            found[" ".join(words)] = list(getattr(command, "params", []))

    walk(typer.main.get_command(app), [])
    return found


def path_parameters() -> set[tuple[str, str]]:
    return {(words, p.name or "") for words, params in commands().items() for p in params
            if "path" in repr(p.type_descriptor).lower()}


def takes_force(words: str) -> bool:
    return any("--force" in p.opts for p in commands()[words])


def test_every_path_a_command_takes_is_declared_an_input_or_an_output() -> None:
    found = path_parameters()
    assert len(commands()) >= 15  # the walk reached the groups' commands (probe, trace, model)
    assert found - OUTPUTS.keys() - INPUTS == set(), "declare these in OUTPUTS (and test them) or INPUTS"
    assert (OUTPUTS.keys() | INPUTS) - found == set(), "declared, but no command takes them any more"


@pytest.mark.parametrize("key", [k for k, o in OUTPUTS.items() if o.writes != "directory"], ids=" ".join)
def test_a_file_output_is_not_overwritten_without_force(tmp_path: Path, key: tuple[str, str]) -> None:
    output = OUTPUTS[key]
    assert takes_force(key[0]), f"{key[0]} writes a file but has no --force to overwrite it"
    out = tmp_path / f"existing{output.ending}"
    out.write_text("the user's file\n")
    assert_one_line_error(servetune(*output.args(Scratch(tmp_path), out)), str(out), "exists", "--force")
    assert out.read_text() == "the user's file\n"


@pytest.mark.parametrize("key", [k for k, o in OUTPUTS.items() if o.writes == "directory"], ids=" ".join)
def test_a_directory_output_is_not_a_file_in_its_place(tmp_path: Path, key: tuple[str, str]) -> None:
    out = tmp_path / "existing"
    out.write_text("the user's file\n")
    assert_one_line_error(servetune(*OUTPUTS[key].args(Scratch(tmp_path), out)), str(out), "not a directory")
    assert out.read_text() == "the user's file\n"


@pytest.mark.parametrize("key", [k for k, o in OUTPUTS.items() if o.own_input is not None], ids=" ".join)
def test_an_output_is_never_the_commands_own_input(tmp_path: Path, key: tuple[str, str]) -> None:
    output = OUTPUTS[key]
    scratch = Scratch(tmp_path)
    assert output.own_input is not None
    source = output.own_input(scratch)
    before = source.read_bytes()
    force = ["--force"] if takes_force(key[0]) else []
    needle = "own input" if output.writes != "directory" else "not a directory"
    assert_one_line_error(servetune(*output.args(scratch, source), *force), str(source), needle)
    assert source.read_bytes() == before


@pytest.mark.parametrize("key", [k for k, o in OUTPUTS.items() if o.writes != "directory"], ids=" ".join)
def test_a_name_that_promises_another_format_is_refused(tmp_path: Path, key: tuple[str, str]) -> None:
    output = OUTPUTS[key]
    scratch = Scratch(tmp_path)
    out = tmp_path / "named" / f"result{WRONG_ENDING[output.writes]}"
    args = output.args(scratch, out)  # its inputs made first: what follows must add nothing to them
    before = tree(tmp_path)
    assert_one_line_error(servetune(*args), str(out), "promises", output.writes)
    assert tree(tmp_path) == before and not out.parent.exists()
