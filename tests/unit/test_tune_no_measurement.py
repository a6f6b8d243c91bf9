"""A study in which nothing could run has no verdict: it says what failed, exits 1, and writes no
recommended config; the finalist count in the verdict matches the study's `finalists`."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import servetune

from servetune.analysis import analysis
from servetune.engine.config import Config
from servetune.load.records import RunResult
from servetune.models.presets import make_model
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.vocabulary import Outcome

STUDY = """\
name: nothing-runs
engine:
  command: ['{engine}']
  model: '{model}'
  startup_timeout_s: 5
space:
  max-num-seqs: [4, 8]
scenarios:
  - {name: one, input_len: 8, output_len: 4, num_prompts: 2}
strategy: ofat
replicates: 2
finalists: {finalists}
"""


def _unrunnable_study(tmp_path: Path, finalists: int, program: str = "servetune-test-engine") -> Path:
    """A study whose engine program is there (the start's check passes) but cannot be run: a
    file without the execute bit, so every boot fails as it starts. Named from the working
    directory (`tmp_path`), so the detail's line stays short."""
    (tmp_path / program).parent.mkdir(parents=True, exist_ok=True)  # `[/]` in a name is a folder too
    (tmp_path / program).write_text("not a program\n")
    make_model("tiny", tmp_path / "tiny")
    study = tmp_path / "study.yaml"
    study.write_text(STUDY.replace("{engine}", f"./{program}").replace("{model}", "./tiny")
                     .replace("{finalists}", str(finalists)))
    return study


@pytest.mark.parametrize("finalists", [0, 2])
def test_study_where_every_trial_failed(tmp_path: Path, finalists: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    study = _unrunnable_study(tmp_path, finalists)
    out = tmp_path / "out"
    result = servetune("tune", study, "--out", out)
    assert result.code == 1, result
    assert "Traceback" not in result.stderr
    assert "no verdict: no trial produced a measurement (baseline failed: crashed — cannot run " \
           "'./servetune-test-engine'" in " ".join(result.stdout.split())
    assert "beat the baseline" not in result.stdout
    assert not (out / "baseline").exists() and not (out / "winner").exists()
    report = (out / "report.md").read_text()
    assert "No recommended config: the baseline produced no measurement" in report
    assert "Recommended config (the baseline" not in report and "vllm serve" not in report


def test_failure_text_with_markup_does_not_stop_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The trial's detail names the command; shown as rich markup, `[/]` raised MarkupError mid-study.
    monkeypatch.chdir(tmp_path)
    study = _unrunnable_study(tmp_path, 0, program="servetune-test-[/]-engine")
    result = servetune("tune", study, "--out", tmp_path / "out")
    assert result.code == 1, result
    assert "Traceback" not in result.stderr
    assert "cannot run './servetune-test-[/]-engine'" in " ".join(result.stdout.split())


def _ok_run(store: StudyStore, trial_id: int, replicate: int, value: float) -> None:
    result = RunResult(scenario="one", summary={"output_throughput": value, "completed": 2, "failed": 0})
    store.record_run(trial_id, replicate, result, started_at=0.0, ended_at=1.0)


def _trial(store: StudyStore, role: str, config: Config, params: dict, outcome: str, values: list[float],
           detail: str | None = None) -> None:
    trial = store.begin_trial(TrialRole(role), config, params)
    for rep, value in enumerate(values, 1):
        _ok_run(store, trial.id, rep, value)
    store.finish_trial(trial.id, Outcome(outcome), detail=detail)


def test_no_finalists_study_does_not_speak_of_re_validation(tmp_path: Path) -> None:
    spec = parse_study(STUDY.replace("{finalists}", "0"))
    store = StudyStore.in_dir(tmp_path)
    _trial(store, "baseline", spec.baseline_config(), {}, "ok", [10.0, 10.2, 9.9])
    _trial(store, "candidate", spec.config_for({"max-num-seqs": 8}), {"max-num-seqs": 8}, "ok", [10.1, 9.9, 10.0])
    _trial(store, "baseline_check", spec.baseline_config(), {}, "ok", [10.1, 9.8, 10.0])  # boot variance known
    result = analysis.analyze(store, spec)
    assert result.winner is None and result.baseline_measured
    assert "finalists: 0" in result.winner_reason and "after re-validation" not in result.winner_reason
    assert "1 candidate(s) screened" in result.winner_reason


def test_failed_baseline_with_measured_candidates_has_no_verdict(tmp_path: Path) -> None:
    spec = parse_study(STUDY.replace("{finalists}", "0"))
    store = StudyStore.in_dir(tmp_path)
    _trial(store, "baseline", spec.baseline_config(), {}, "port_in_use", [], detail="port 8000 is taken\nmore")
    _trial(store, "candidate", spec.config_for({"max-num-seqs": 8}), {"max-num-seqs": 8}, "ok", [10.1, 9.9, 10.0])
    result = analysis.analyze(store, spec)
    assert result.winner is None and not result.baseline_measured
    assert result.winner_reason == ("baseline failed: port_in_use — port 8000 is taken; "
                                    "nothing to compare the 1 measured candidate(s) against")
