"""Racing inside a trial (tune/racing.py) and cheap screening (analysis/screening.py), on the counting
engine's fake servers: a clearly worse candidate stops after its first replicate and is never a
finalist, a resumed study keeps the stop, a candidate as fast as the baseline is not stopped, and
screening boots run a share of the prompts while finalists run them all."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console

from servetune.analysis import analysis, known, screening
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.load.records import RunResult, RunSummary
from servetune.report.context import build as build_report_data
from servetune.search.base import TrialView
from servetune.search.optuna_tpe import OptunaTPE
from servetune.store import StudyStore, TrialRole
from servetune.study.spec import SpecError, StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.racing import STOPPED_CLEARLY_WORSE
from servetune.tune.runner import StudyRunner
from servetune.vocabulary import Outcome
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.counting_engine import CPU_DEFAULTS, CountingEngine
from tests.fakes.launch import fake_server

SLOW = 16   # the max-num-seqs whose "boot" answers on the slow server


def _spec(**extra: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "racing",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(MODEL_WITHOUT_WEIGHTS)},
        # Grid order: 8 (as fast as the baseline), 32 (as fast), 16 (far slower), each after a baseline check,
        # so the boot-to-boot variance is known (the baseline booted twice) before either fast one is judged.
        "space": {"max-num-seqs": [8, 32, SLOW]},
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 4, "warmups": 0}],
        "strategy": "grid", "replicates": 3, "finalists": 0, "baseline_every": 1, "budget": {"trials": 3},
        **extra,
    })


def _run(out: Path, spec: StudySpec, fast: str, slow: str) -> tuple[CountingEngine, StudyStore]:
    runner = StudyRunner(spec, out, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    runner.store.set_meta_json(known.DEFAULTS_META, CPU_DEFAULTS.model_dump(mode="json"))  # no vLLM here
    engine = CountingEngine(fast, lambda c: BootFacts(),
                            url_for=lambda c: slow if c.flags.get("max-num-seqs") == SLOW else fast)
    runner.engine = runner.executor.engine = engine
    runner.run()
    return engine, runner.store


def _by_seqs(store: StudyStore) -> dict[int | None, Any]:
    return {t.config.flags.get("max-num-seqs"): t for t in store.trials() if t.role is TrialRole.candidate}


def test_a_clearly_worse_candidate_stops_after_one_replicate_and_a_resume_keeps_the_stop(tmp_path: Path) -> None:
    out = tmp_path / "study"
    with fake_server(ttft_ms=1, itl_ms=1) as fast, fake_server(ttft_ms=400, itl_ms=150) as slow:
        _, store = _run(out, _spec(), fast, slow)
        candidates = _by_seqs(store)
        worse = candidates[SLOW]
        assert worse.stopped_early is not None and worse.stopped_early.startswith(STOPPED_CLEARLY_WORSE)
        assert worse.ok and worse.detail == worse.stopped_early
        assert sorted(r.replicate for r in worse.ok_runs()) == [1]
        for close in (candidates[8], candidates[32]):  # as fast as the baseline: measured in full
            assert close.stopped_early is None and sorted(r.replicate for r in close.ok_runs()) == [1, 2, 3]
        result = analysis.analyze(store, _spec())
        stopped = next(c for c in result.configs if worse.id in c.trial_ids)
        assert stopped.stopped_early == worse.stopped_early and len(stopped.objective_samples) == 1  # its run counts
        assert "3 candidate(s) screened, 0 promising, 1 stopped early: clearly worse" in \
            build_report_data(result, store).headline
        store.close()

        # A kill after the stop was stored, before the trial ended: the resumed study ends it unbooted.
        store = StudyStore(out / StudyStore.FILENAME)
        store.reopen_trial(worse.id)
        store.close()
        engine, store = _run(out, _spec(), fast, slow)
        again = store.trial(worse.id)
        assert again.done and again.stopped_early == worse.stopped_early
        assert [c.flags.get("max-num-seqs") for c in engine.started] == []   # nothing booted again
        assert sorted(r.replicate for r in again.ok_runs()) == [1]


def test_racing_off_measures_every_replicate(tmp_path: Path) -> None:
    with fake_server(ttft_ms=1, itl_ms=1) as fast, fake_server(ttft_ms=400, itl_ms=150) as slow:
        _, store = _run(tmp_path / "study", _spec(racing={"enabled": False}), fast, slow)
    worse = _by_seqs(store)[SLOW]
    assert worse.stopped_early is None and sorted(r.replicate for r in worse.ok_runs()) == [1, 2, 3]


def _measure(store: StudyStore, role: TrialRole, seqs: int | None, value: float, reps: int = 3) -> None:
    """A done trial of `role` whose runs read `value` (and 1-3 % more); `seqs` None: the baseline's config."""
    params = {} if seqs is None else {"max-num-seqs": seqs}
    trial = store.begin_trial(role, Config.of(params), params)
    for r in range(1, reps + 1):
        summary = RunSummary(output_throughput=value * (1 + 0.01 * r), completed=4)
        store.record_run(trial.id, r, _result(summary), started_at=0.0, ended_at=1.0)
    store.finish_trial(trial.id, Outcome.ok)


def _result(summary: RunSummary) -> RunResult:
    return RunResult(scenario="s", outcome=Outcome.ok, summary=summary)


def test_a_stopped_candidate_is_never_a_finalist(tmp_path: Path) -> None:
    spec = _spec(finalists=2)
    store = StudyStore.in_dir(tmp_path)
    _measure(store, TrialRole.baseline, None, 100.0)
    _measure(store, TrialRole.candidate, 8, 130.0)
    _measure(store, TrialRole.candidate, 32, 120.0)
    assert set(analysis.pick_finalists(store, spec, 2)) == {c.key() for c in (
        Config.of({"max-num-seqs": 8}), Config.of({"max-num-seqs": 32}))}
    best = next(t for t in store.trials() if t.config.flags.get("max-num-seqs") == 8)
    store.stop_early(best.id, STOPPED_CLEARLY_WORSE)
    assert analysis.pick_finalists(store, spec, 2) == [Config.of({"max-num-seqs": 32}).key()]
    headline = build_report_data(analysis.analyze(store, spec), store).headline
    assert "2 candidate config(s) tried, 0 failed to run, 1 stopped early: clearly worse" in headline, headline


def test_screening_runs_a_share_of_the_prompts_and_finalists_run_them_all() -> None:
    spec = _spec(screening={"num_prompts_fraction": 0.5})
    assert [s.num_prompts for s in screening.scenarios_for(spec, TrialRole.candidate)] == [2]
    assert [s.num_prompts for s in screening.scenarios_for(spec, TrialRole.baseline_check)] == [2]
    assert [s.num_prompts for s in screening.scenarios_for(spec, TrialRole.finalist)] == [4]
    assert [s.num_prompts for s in screening.scenarios_for(spec, TrialRole.baseline_final)] == [4]
    assert [s.num_prompts for s in screening.scenarios_for(_spec(), TrialRole.candidate)] == [4]


def test_each_run_length_is_divided_by_the_baseline_measured_at_that_length(tmp_path: Path) -> None:
    """Short runs read 20 % lower on every config: the ratio to the baseline at the same length
    cancels it, so a finalist's short screening boot and full boots agree."""
    spec = _spec(screening={"num_prompts_fraction": 0.5}, finalists=1)
    store = StudyStore.in_dir(tmp_path)
    _measure(store, TrialRole.baseline, None, 80.0)      # short
    _measure(store, TrialRole.candidate, 8, 88.0)     # short: +10 %
    _measure(store, TrialRole.baseline_final, None, 100.0)
    _measure(store, TrialRole.finalist, 8, 110.0)     # full: +10 %
    config = next(c for c in analysis.analyze(store, spec).configs if c.key == Config.of({"max-num-seqs": 8}).key())
    means = [sum(b) / len(b) for b in config.objective_boots]
    assert len(means) == 2 and abs(means[0] - 1.10) < 1e-9 and abs(means[1] - 1.10) < 1e-9, means


def test_tpe_hears_a_stopped_trial_as_pruned(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    _measure(store, TrialRole.candidate, 8, 50.0, reps=1)
    trial = store.trials()[0]
    store.stop_early(trial.id, STOPPED_CLEARLY_WORSE)
    spec = _spec(strategy="optuna", space={"max-num-seqs": {"low": 4, "high": 64, "log": True, "type": "int"}})
    frozen = OptunaTPE(spec)._frozen(TrialView(params={"max-num-seqs": 8}, samples=(0.5,), trial=store.trial(trial.id)))
    assert frozen is not None and frozen.state is optuna.trial.TrialState.PRUNED
    assert frozen.intermediate_values == {0: 0.5}


def test_short_screening_under_maximize_capacity_is_the_study_files_error() -> None:
    with pytest.raises(SpecError, match="screening.num_prompts_fraction: a capacity search sends"):
        _spec(objective={"maximize": "capacity", "slo": {"p99_ttft_ms": 1000}},
              screening={"num_prompts_fraction": 0.5})


def test_a_version_5_store_written_before_the_column_gets_it_on_open(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    _measure(store, TrialRole.candidate, 8, 50.0, reps=1)
    store._conn.execute("ALTER TABLE trials DROP COLUMN stopped_early")   # as a v5 store from before racing
    store.close()
    store = StudyStore.in_dir(tmp_path)
    trial = store.trials()[0]
    assert trial.stopped_early is None
    store.stop_early(trial.id, STOPPED_CLEARLY_WORSE)
    assert store.trial(trial.id).stopped_early == STOPPED_CLEARLY_WORSE
