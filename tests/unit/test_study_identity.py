"""A study directory holds one study: resuming it with another study file is refused, but a field
that a newer servetune added (stored specs lack it) is not a change."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from servetune.errors import ServetuneError
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS


def _spec(tmp_path: Path, **objective) -> StudySpec:
    return StudySpec.model_validate({
        "name": "identity",
        "engine": {"command": [sys.executable, "-c", "pass"], "model": str(MODEL_WITHOUT_WEIGHTS)},
        "space": {"max-num-seqs": [4, 8]},
        "scenarios": [{"name": "a", "input_len": 8, "output_len": 4, "concurrency": 1}],
        "objective": {"maximize": "output_throughput", **objective},
    })


def _stored_before_per_gpu(tmp_path: Path, out: Path) -> None:
    """The spec as a servetune from before `objective.per_gpu` stored it."""
    stored = _spec(tmp_path).model_dump(mode="json")
    del stored["objective"]["per_gpu"]
    store = StudyStore.in_dir(out)
    store.set_meta_json("spec", stored)
    store.close()


def _runner(spec: StudySpec, out: Path) -> StudyRunner:
    return StudyRunner(spec, out, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))


def test_a_field_added_since_the_study_started_is_not_a_change(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _stored_before_per_gpu(tmp_path, out)
    runner = _runner(_spec(tmp_path), out)   # the same study: no error
    # Stored anew (with the field) once the start's flag check passed; until then it is left as it was.
    assert "per_gpu" not in runner.store.spec_doc()["objective"]


def test_setting_a_field_added_since_is_a_change(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _stored_before_per_gpu(tmp_path, out)
    with pytest.raises(ServetuneError, match=r"holds a different study \(changed: objective\)"):
        _runner(_spec(tmp_path, per_gpu=True), out)
