"""Every study under examples/ loads, says what it answers, how long it takes and what to change,
and plans (its candidates and boots) without a boot."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.defaults import EngineDefaults
from servetune.models.source import ModelSource
from servetune.study import load_study
from servetune.tune.plan import assemble

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").rglob("*.yaml"))
# The studies for a user's own GPU (examples/h200/ are the published studies' files).
FOR_USERS = ["dense-8b-one-gpu", "moe-one-gpu", "chat-capacity", "multi-gpu-slots"]


def test_the_user_examples_are_there() -> None:
    assert set(FOR_USERS) <= {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_loads_and_plans(path: Path) -> None:
    spec = load_study(path)
    plan = assemble(spec, EngineDefaults(), ModelSource(spec.engine.model, True, "test", None, None))
    assert plan.boots >= spec.parallel.slots and plan.eta_s > 0


@pytest.mark.parametrize("name", FOR_USERS)
def test_user_example_header_answers_the_three_questions(name: str) -> None:
    path = next(p for p in EXAMPLES if p.stem == name)
    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    for question in ("What it answers:", "How long:", "What to change:", "servetune tune "):
        assert question in header, (name, question)
    spec = load_study(path)
    assert "/" in spec.engine.model and not spec.engine.model.startswith((".", "/"))  # a Hugging Face id
    assert spec.engine.args.get("load-format") != "dummy"  # real weights
