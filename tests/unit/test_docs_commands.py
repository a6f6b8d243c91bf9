"""Every command the docs show in a ```bash title="tested"``` block runs against the CLI, so the docs
stay true; and the generated study file reference covers every key of the study models.

Tested blocks hold cheap commands only (`--help`, `init`, `plan`, `tune ... --dry-run`, `model
make`): a block runs top to bottom in a scratch directory that has the repository's `examples/`,
`tests/e2e/studies/`, `models/tiny` and a Hugging Face cache with the configs of the models the
pages name (no weights, no network).
vLLM's parser is read once for the module (the real one, a subprocess of ~15 s), not per command.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from cli_run import servetune

from servetune.engine import vllm
from servetune.engine.defaults import read_engine_defaults
from servetune.engine.vllm import VllmEngine
from servetune.models.presets import make_model
from servetune.study.reference import MEANINGS, study_reference

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TESTED = re.compile(r'^```bash title="tested"\n(.*?)^```', re.M | re.S)
# The models the pages name by Hugging Face id, and the `model make` preset with their shapes.
HUB_MODELS = {"Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b"}
CHEAP = {"init", "plan", "model"}


def blocks_in_pages() -> list[tuple[str, int, list[str]]]:
    """(page, block number, commands) of every tested block; continuation lines joined."""
    blocks = []
    for page in PAGES:
        for n, match in enumerate(TESTED.finditer(page.read_text()), 1):
            text = match.group(1).replace("\\\n", " ")
            commands = [line.split("  #", 1)[0].strip() for line in text.splitlines()]
            blocks.append((str(page.relative_to(ROOT)), n, [c for c in commands if c and not c.startswith("#")]))
    return blocks


BLOCKS = blocks_in_pages()


def test_the_pages_have_tested_blocks() -> None:
    pages = {page for page, _, _ in BLOCKS}
    assert {"README.md", "docs/index.md", "docs/guides/tuning.md"} <= pages, pages


@pytest.fixture(scope="module")
def real_defaults():
    defaults = read_engine_defaults(["python", "-m", "vllm.entrypoints.openai.api_server"], vllm.PROFILE,
                                    vllm.DEFAULTS_PROBE)
    assert defaults.known and defaults.flags, defaults.source
    return defaults


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_defaults) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copytree(ROOT / "tests" / "e2e" / "studies", tmp_path / "tests" / "e2e" / "studies")
    make_model("tiny", tmp_path / "models" / "tiny")  # the e2e studies' ./models/tiny
    cache = tmp_path / "hf-cache"
    for model_id, preset in HUB_MODELS.items():
        repo = cache / ("models--" + model_id.replace("/", "--"))
        make_model(preset, repo / "snapshots" / "0")
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(VllmEngine, "read_defaults", lambda self: real_defaults)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(("page", "n", "commands"), BLOCKS, ids=[f"{p}#{n}" for p, n, _ in BLOCKS])
def test_tested_block_runs(workspace: Path, page: str, n: int, commands: list[str]) -> None:
    for command in commands:
        words = shlex.split(command)
        assert words[0] == "servetune", f"{page} block {n}: only servetune commands may be tested: {command}"
        cheap = words[1] in CHEAP or "--help" in words or "--dry-run" in words
        assert cheap, f"{page} block {n}: {command!r} is not cheap enough to run in the tests (see the docstring)"
        result = servetune(*words[1:])
        assert result.code == 0, f"{page} block {n}: {command}\n{result.stdout}\n{result.stderr}"


def test_reference_has_a_meaning_for_every_key() -> None:
    text = study_reference()
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 60
    # the meaning column: empty, or only a bound like "(>= 1)", is a key the reference leaves unexplained
    blank = [row[0] for row in rows if re.fullmatch(r"\s*(\([^)]*\))?\s*", row[3])]
    assert blank == []
    assert "`speculative-config" not in text  # engine flags are the engine's, not the reference's
    for key in ("`baseline_every`", "`gpus_per_trial`", "`shared_prefix`", "`num_prompts`", "`chat-bursty`"):
        assert key in text


def test_reference_meanings_name_real_fields() -> None:
    from servetune.study.reference import _models_in  # the walk the reference itself makes
    from servetune.study.spec import StudySpec

    models, todo = {StudySpec}, [StudySpec]
    while todo:
        for info in todo.pop().model_fields.values():
            for sub in _models_in(info.annotation):
                if sub not in models:
                    models.add(sub)
                    todo.append(sub)
    fields = {f"{m.__name__}.{name}" for m in models for name in m.model_fields}
    assert set(MEANINGS) <= fields, set(MEANINGS) - fields
