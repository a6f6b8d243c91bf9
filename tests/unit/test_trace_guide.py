"""docs/guides/traces.md, run: every `servetune` command of its bash blocks, on the Mooncake
excerpt and against the self-stamping FAKE server, with the substitutions the guide lists under
"What the tests substitute"; its study file loaded as a study."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from servetune.study.spec import StudySpec
from tests.fakes.launch import fake_server
from tests.unit.cli_run import servetune

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "traces.md"
EXCERPT = REPO / "tests" / "fixtures" / "traces" / "mooncake-excerpt.jsonl"
TINY = REPO / "models" / "tiny"
FASTER = {"bench": ["--speedup", "25", "--trace-set", "token_scale=0.03125"],
          "capacity": ["--start", "25", "--max-levels", "2", "--max-runs-per-level", "1",
                       "--trace-set", "token_scale=0.03125"]}


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", GUIDE.read_text(), re.S)


def guide_commands() -> list[list[str]]:
    return [shlex.split(line)[1:] for block in _blocks("bash") for line in block.splitlines()
            if line.startswith("servetune ")]


def _substituted(argv: list[str], tmp: Path, url: str) -> list[str]:
    out = []
    for arg in argv:
        if arg == "mooncake-conversation.jsonl":
            arg = str(EXCERPT)
        elif arg in ("window.jsonl", "trace.png", "my-traffic.yaml") or arg.startswith("runs/"):
            arg = str(tmp / arg)
        elif arg == "http://localhost:8000":
            arg = url
        out.append(arg)
    if out[0] in FASTER:
        out = [a for i, a in enumerate(out) if not (a == "--speedup" or out[i - 1] == "--speedup")]
        out += [*FASTER[out[0]], "--tokenizer", str(TINY)]
    return out


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with fake_server(ttft_ms=1, itl_ms=1, prefix_cache_block=16) as url:
        yield url


def test_the_guide_has_the_commands_this_test_runs() -> None:
    assert [c[:2] for c in guide_commands()] == [["trace", "summary"], ["trace", "summary"], ["trace", "cut"],
                                                 ["bench", "--url"], ["capacity", "--url"], ["tune", "my-traffic.yaml"]]


def test_every_command_of_the_guide_runs(fake_url: str, tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    for argv in guide_commands():
        if argv[0] == "tune":
            continue  # a study boots vLLM: its file is checked below, a trace study runs in test_trace_study.py
        args = _substituted(argv, tmp_path, fake_url)
        result = servetune(*args)
        assert result.code == 0, (args, result.stderr)
    assert (tmp_path / "trace.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "window.jsonl").read_text().splitlines()) == 300   # the excerpt is shorter than 600 s
    replay = json.loads((tmp_path / "runs" / "replay.json").read_text())
    assert replay["completed"] == 300 and replay["prompt_tokens_mismatched"] == 0
    assert replay["prefix_hit_rate_measured"] == replay["prefix_hit_rate_implied"] > 0
    capacity = json.loads((tmp_path / "runs" / "capacity.json").read_text())
    assert capacity["load"] == "speedup" and capacity["levels"][0]["level"] == 25


def test_the_guides_study_is_a_capacity_study_of_the_trace(tmp_path: Path) -> None:
    (study,) = _blocks("yaml")
    data = yaml.safe_load(study)
    data["engine"]["model"] = str(tmp_path)
    data["scenarios"][0]["trace"]["path"] = str(EXCERPT)
    spec = StudySpec.model_validate(data)
    (scenario,) = spec.scenarios
    assert spec.objective.maximize == "capacity" and scenario.trace is not None and scenario.trace.path == EXCERPT
