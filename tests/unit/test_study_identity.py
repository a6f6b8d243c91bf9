"""A study directory holds one study: resuming it with another study file is refused, but a field
that a newer servetune added (stored specs lack it) is not a change."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from servetune.analysis import known
from servetune.engine.defaults import EngineDefaults
from servetune.errors import ServetuneError
from servetune.store import StudyStore, TrialRole
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


def _with_a_trial(out: Path) -> None:
    store = StudyStore.in_dir(out)
    session = store.begin_session()
    store.begin_trial(TrialRole.baseline, _spec(out).baseline_config(), {}, session_id=session)
    store.end_session(session, "killed")
    store.close()


def test_setting_a_field_added_since_is_a_change(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _stored_before_per_gpu(tmp_path, out)
    _with_a_trial(out)
    with pytest.raises(ServetuneError, match=r"holds a different study \(changed: objective\)"):
        _runner(_spec(tmp_path, per_gpu=True), out)


def _stored_without_a_trial(out: Path, spec: StudySpec) -> None:
    """As a servetune that stored the spec before the flag check left a start the check refused:
    the spec and the engine's defaults it read, no trial."""
    store = StudyStore.in_dir(out)
    store.set_spec_doc(spec.model_dump(mode="json"))
    store.set_meta_json(known.DEFAULTS_META, EngineDefaults(source="the refused start's engine").model_dump())
    store.close()


def test_another_study_file_replaces_a_stored_spec_without_a_trial(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _stored_without_a_trial(out, _spec(tmp_path))
    said = io.StringIO()
    runner = StudyRunner(_spec(tmp_path, per_gpu=True), out,
                         display=StudyDisplay(Console(file=said, width=500), enabled=False))
    # Nothing of the refused start is kept: this start reads the defaults and stores its spec anew.
    assert (runner.store.spec_doc(), runner.store.get_meta_json(known.DEFAULTS_META)) == (None, None)
    assert said.getvalue().splitlines() == [f"{runner.store.path}: the stored study spec had no trial; replaced "
                                            "by this study file's (changed: objective)"]


def test_a_stored_spec_with_a_trial_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "study"
    _stored_without_a_trial(out, _spec(tmp_path))
    _with_a_trial(out)
    with pytest.raises(ServetuneError, match=r"holds a different study \(changed: objective\)"):
        _runner(_spec(tmp_path, per_gpu=True), out)
    store = StudyStore.open_existing(out, read_only=True)
    assert store.spec_doc() == _spec(tmp_path).model_dump(mode="json")
    assert store.get_meta_json(known.DEFAULTS_META) is not None
