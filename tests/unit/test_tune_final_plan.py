"""The plan after the search: finalists and their baseline boots, or, when no candidate earned
re-validation, one more baseline boot so that every verdict can carry boot-to-boot variance."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from rich.console import Console

from servetune.analysis import analysis
from servetune.store import TrialRole
from servetune.study import parse_study
from servetune.tune import phases
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.unit.test_tune_analysis import STUDY, _trial


def _runner(tmp_path: Path, finalists: int) -> tuple[StudyRunner, list[tuple[str, str]]]:
    spec = parse_study(STUDY.replace("model: m,", f"model: {MODEL_WITHOUT_WEIGHTS},") + f"finalists: {finalists}\n")
    runner = StudyRunner(spec, tmp_path, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    started: list[tuple[str, str]] = []
    runner._start_trial = lambda work, slot: started.append((work.role, work.config.key()))  # type: ignore[method-assign]
    return runner, started


def _worse_candidates(runner: StudyRunner) -> None:
    rng = np.random.default_rng(3)
    _trial(runner.store, runner.spec, rng, "baseline", {}, 100)
    _trial(runner.store, runner.spec, rng, "candidate", {"max-num-seqs": 8}, 90)
    _trial(runner.store, runner.spec, rng, "candidate", {"max-num-seqs": 16}, 80)


def test_no_finalist_still_boots_the_baseline_again_so_verdicts_know_boot_variance(tmp_path: Path) -> None:
    runner, started = _runner(tmp_path, finalists=1)
    _worse_candidates(runner)
    assert analysis.pick_finalists(runner.store, runner.spec, 1) == []
    runner._validate_finalists()
    assert started == [("baseline_final", runner.spec.baseline_config().key())]


def test_finalists_zero_asks_for_no_boot_after_the_search(tmp_path: Path) -> None:
    runner, started = _runner(tmp_path, finalists=0)
    _worse_candidates(runner)
    runner._validate_finalists()
    assert started == []


def test_no_extra_boot_when_the_baseline_was_already_booted_twice(tmp_path: Path) -> None:
    runner, started = _runner(tmp_path, finalists=1)
    _worse_candidates(runner)
    _trial(runner.store, runner.spec, np.random.default_rng(4), "baseline_check", {}, 100)
    runner._validate_finalists()
    assert started == []


def test_without_a_second_boot_the_study_says_why_it_has_no_verdict(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, finalists=0)
    _worse_candidates(runner)
    result = analysis.analyze(runner.store, runner.spec)
    assert result.winner is None
    assert result.winner_reason.startswith("no verdict: boot-to-boot variance is unknown")
    assert all(c.objective_effect is None for c in result.configs)


def test_finalists_zero_is_said_as_such_not_as_no_candidate_beating_the_baseline(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, finalists=0)
    notes: list[str] = []
    runner.display.note = notes.append  # type: ignore[method-assign]
    rng = np.random.default_rng(5)
    _trial(runner.store, runner.spec, rng, "baseline", {}, 100)
    _trial(runner.store, runner.spec, rng, "candidate", {"max-num-seqs": 8}, 120)  # beats it, yet no finalist
    runner._validate_finalists()
    assert notes == ["finalists: 0: no candidate is re-validated on a fresh boot"]


def test_each_finalist_follows_its_own_baseline_boot_on_the_same_slot(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, finalists=2)
    rng = np.random.default_rng(6)
    _trial(runner.store, runner.spec, rng, "baseline", {}, 100)
    _trial(runner.store, runner.spec, rng, "candidate", {"max-num-seqs": 8}, 120)
    _trial(runner.store, runner.spec, rng, "candidate", {"max-num-seqs": 16}, 130)
    final = phases.FinalPhase(runner._study_state())
    assert final.next_round()
    two_free = phases.SlotsNow(live=2, running=0)
    handed = [(slot, final.next_work(slot, two_free)) for slot in (0, 1, 0, 1, 0)]
    assert [(slot, w.role if w else None) for slot, w in handed] == [
        (0, TrialRole.baseline_final), (1, TrialRole.baseline_final),
        (0, TrialRole.finalist), (1, TrialRole.finalist), (0, None)]
    planned = [step.config_key for step in runner.store.final_plan() or [] if step.role is TrialRole.finalist]
    assert [w.config.key() for _, w in handed if w and w.role is TrialRole.finalist] == planned
    assert len(set(planned)) == 2
