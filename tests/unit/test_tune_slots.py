"""Several trials at once (`parallel.slots`) with an engine that boots nothing: the ask/tell runner
hands each free slot its own config, measures the baseline on every slot, goes on after a crash,
and reaches the verdict a single slot reaches."""

from __future__ import annotations

import io
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from servetune.analysis import analysis, known
from servetune.engine import VllmEngine
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.placement import Placement, plan_placements
from servetune.engine.registry import cpu_bind_variables
from servetune.errors import ServetuneError
from servetune.report import write_report
from servetune.store import StudyStore, TrialRole
from servetune.study.spec import StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from servetune.vocabulary import Outcome
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.counting_engine import CPU_DEFAULTS, CountingEngine
from tests.fakes.launch import fake_server

FAST = 8  # the one max-num-seqs whose server streams 4x faster


def _spec(tmp_path: Path, slots: int, **extra: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "slots",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(MODEL_WITHOUT_WEIGHTS),
                   "args": {"max-num-seqs": 4}},
        "space": {"max-num-seqs": [4, 8, 16, 32]},
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 16, "num_prompts": 4, "concurrency": 2,
                       "warmups": 0}],
        "strategy": "grid", "replicates": 3, "finalists": 1, "baseline_every": 2,
        "parallel": {"slots": slots}, **extra,
    })


def _tune(tmp_path: Path, spec: StudySpec, name: str, fails_for=lambda config: None,
          ) -> tuple[CountingEngine, StudyStore, analysis.StudyAnalysis]:
    with fake_server(ttft_ms=2, itl_ms=1) as fast, fake_server(ttft_ms=2, itl_ms=4) as slow:
        runner = StudyRunner(spec, tmp_path / name, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
        runner.store.set_meta_json(known.DEFAULTS_META, CPU_DEFAULTS.model_dump(mode="json"))  # no vLLM here
        engine = CountingEngine(fast, lambda config: BootFacts(), fails_for,
                                url_for=lambda c: fast if c.flags.get("max-num-seqs") == FAST else slow)
        runner.engine = runner.executor.engine = engine
        result = runner.run()
    return engine, runner.store, result


def test_two_slots_run_the_grid_once_each_and_reach_the_single_slot_verdict(tmp_path: Path) -> None:
    _, one_store, one = _tune(tmp_path, _spec(tmp_path, 1), "one")
    engine, store, two = _tune(tmp_path, _spec(tmp_path, 2), "two")
    candidates = [t.config.key() for t in store.trials(TrialRole.candidate)]
    assert len(candidates) == 3 and len(set(candidates)) == 3  # no config handed out twice
    assert {t.slot for t in store.trials(TrialRole.candidate)} == {0, 1}  # both slots measured candidates
    # Each slot's first trial is the baseline there.
    for slot in (0, 1):
        first = next(t for t in store.trials() if t.slot == slot)
        assert first.role == "baseline"
    assert all(t.status == "done" and t.outcome == "ok" for t in store.trials())
    assert one.winner is not None and one.winner.params == {"max-num-seqs": FAST}, one.winner_reason
    assert two.winner is not None and two.winner.params == {"max-num-seqs": FAST}, two.winner_reason
    # The slot's placement went to the engine and is on the trial, and is not part of the config.
    cpus = [p.cpus for p in engine.placements]
    assert all(c for c in cpus) and len(set(cpus)) == 2
    assert {t.placement.slot for t in store.trials() if t.placement} == {0, 1}
    baselines = {t.config.key() for t in store.trials() if t.role in analysis.BASELINE_ROLES}
    assert baselines == {_spec(tmp_path, 2).baseline_config().key()}
    assert [t.slot for t in one_store.trials()] == [0] * len(one_store.trials())
    # The report says which slot measured what (and a one-slot report has no such column).
    md = write_report(two, store, tmp_path / "report-two")["markdown"].read_text()
    first = store.trials()[0]
    assert f"| {first.seq} | baseline | baseline | slot {first.slot} (cpus " in md
    assert "| slot |" not in write_report(one, one_store, tmp_path / "report-one")["markdown"].read_text()


def test_a_slot_whose_trial_crashes_goes_on(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 2, budget={"trials": 3}, finalists=0)
    _engine, store, _ = _tune(tmp_path, spec, "crash",
                             fails_for=lambda c: Outcome.crashed if c.flags.get("max-num-seqs") == 16 else None)
    outcomes = Counter((t.role, t.outcome) for t in store.trials())
    assert outcomes[("candidate", "crashed")] == 1 and outcomes[("candidate", "ok")] == 2
    crashed = next(t for t in store.trials() if t.outcome == "crashed")
    later = [t for t in store.trials() if t.slot == crashed.slot and t.seq > crashed.seq]
    assert later and all(t.outcome == "ok" for t in later)  # the slot ran on after its crash


def test_baseline_every_counts_per_slot(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 2, finalists=0, baseline_every=1)
    _, store, _ = _tune(tmp_path, spec, "every")
    for slot in (0, 1):
        roles = [t.role for t in store.trials() if t.slot == slot]
        # on each slot no two candidates follow each other without a baseline boot between them
        assert roles[0] == "baseline"
        assert all(not (a == b == "candidate") for a, b in zip(roles, roles[1:])), roles


def test_a_search_that_runs_dry_boots_no_check_after_its_last_candidate(tmp_path: Path) -> None:
    """Three candidates, a re-measurement due after every third, a budget above the space: the
    check would measure nothing a candidate is compared with, so the study ends without it, and
    its planned trial count said so from the start."""
    spec = _spec(tmp_path, 1, finalists=0, baseline_every=3, budget={"trials": 10})
    assert analysis.planned_trial_count(StudyStore.in_dir(tmp_path / "plan"), spec) == 4
    engine, store, _ = _tune(tmp_path, spec, "dry")
    assert [t.role for t in store.trials()] == ["baseline", "candidate", "candidate", "candidate"]
    assert len(engine.started) == 4


def test_a_due_check_waits_for_a_candidate_that_boots(tmp_path: Path) -> None:
    """OFAT's last proposal, load-format auto, is what the baseline runs by default: the store
    decides it without a boot, so it goes before the re-measurement due after the third
    candidate, and the search then ends with no check booted for nothing."""
    spec = _spec(tmp_path, 1, finalists=0, baseline_every=3, strategy="ofat",
                 space={"max-num-seqs": [8, 16, 32], "load-format": ["auto"]})
    engine, store, _ = _tune(tmp_path, spec, "dup-last")
    assert [(t.role, t.outcome) for t in store.trials()][-1] == ("candidate", "duplicate")
    assert [t.role for t in store.trials()] == ["baseline"] + ["candidate"] * 4
    assert len(engine.started) == 4


def test_running_candidates_are_in_the_history_the_strategy_sees(tmp_path: Path) -> None:
    spec = _spec(tmp_path, 2)
    store = StudyStore.in_dir(tmp_path)
    store.begin_trial(TrialRole.candidate, spec.config_for({"max-num-seqs": 8}), {"max-num-seqs": 8}, slot=1)
    (view,) = analysis.history(store, spec)
    assert view.running and dict(view.params) == {"max-num-seqs": 8} and not view.usable


def test_placements_split_gpus_or_cpus_between_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gpus = plan_placements(2, 2)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in gpus] == ["4,5", "6,7"]
    with pytest.raises(ServetuneError, match="6 GPUs needed"):
        plan_placements(3, 2)
    cpus = plan_placements(2, 0, cpus=[0, 1, 2, 3, 4], bind_env=cpu_bind_variables(["vllm", "sglang"]))
    assert [p.cpus for p in cpus] == [(0, 1), (2, 3)]
    assert cpus[1].env == {"VLLM_CPU_OMP_THREADS_BIND": "2,3"}  # vLLM's binding; SGLang's cores are its affinity
    assert plan_placements(2, 0, cpus=[0, 1], bind_env=cpu_bind_variables(["sglang"]))[1].env == {}
    assert plan_placements(1, 0) == [Placement(0)]  # one slot: the launch of a sequential study
    with pytest.raises(ServetuneError, match="at least 3 CPUs"):
        plan_placements(3, 0, cpus=[0, 1])


def test_a_slot_environment_is_the_servers_not_the_tuners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    engine = VllmEngine(model="m", dev_mode=True)  # as a study's engine is built
    env = engine.environment(Config.of({}), Placement(1, {"CUDA_VISIBLE_DEVICES": "1"}))
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    _tune(tmp_path, _spec(tmp_path, 2, finalists=0, budget={"trials": 1}), "env")
    # A study changes nothing in the tuner's own environment: slots share it.
    assert "VLLM_SERVER_DEV_MODE" not in os.environ
