"""Engines register by kind: a study's `engine: {kind: ...}` selects the class, and a new engine is
one class plus one registration. A toy engine (the counting fake, with its own /metrics names)
runs a whole study without any vLLM class involved."""

from __future__ import annotations

import io
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from servetune.engine import VllmEngine, engine_for, engine_kinds, register_engine, registry
from servetune.engine.bootfacts import BootFacts
from servetune.errors import ServetuneError
from servetune.study import parse_study
from servetune.study.spec import EngineSpec, StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from servetune.vocabulary import MetricNames
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.counting_engine import CountingEngine
from tests.fakes.launch import fake_server

# The fake server's /metrics has one gauge (vLLM's running requests); the toy names it its own way.
TOY_METRICS = MetricNames(counters={}, gauges={"vllm:num_requests_running": "toy_running"})


def _study(tmp_path: Path, kind: str) -> dict:
    return {
        "name": "toy", "engine": {"kind": kind, "command": [sys.executable], "model": str(MODEL_WITHOUT_WEIGHTS)},
        "space": {"max-num-seqs": [4, 8]},
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 2, "warmups": 0}],
        "strategy": "grid", "replicates": 1, "finalists": 0,
    }


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The registry as it is, restored after the test (a toy kind must not leak into others)."""
    table = dict(registry.ENGINES)
    monkeypatch.setattr(registry, "ENGINES", table)
    monkeypatch.setattr(registry, "PROFILES", dict(registry.PROFILES))
    monkeypatch.setattr(registry, "BUILDERS", dict(registry.BUILDERS))
    return table


def test_vllm_is_the_default_kind_and_builds_the_vllm_engine(tmp_path: Path) -> None:
    spec = EngineSpec(model=str(tmp_path))
    assert spec.kind == "vllm" and "vllm" in engine_kinds()
    engine = engine_for(spec)
    assert isinstance(engine, VllmEngine) and engine.dev_mode  # the tuner's servers: prefix cache reset


def test_an_unknown_kind_is_refused_when_the_study_is_read(tmp_path: Path) -> None:
    with pytest.raises(ServetuneError, match=r"toy\.yaml:\d+: engine\.kind: unknown engine kind 'tgi'; known: sglang, vllm"):
        parse_study(yaml.safe_dump(_study(tmp_path, "tgi")), "toy.yaml")


def test_an_unknown_kind_built_in_code_is_refused_where_its_engine_is_built(tmp_path: Path) -> None:
    spec = StudySpec.model_validate(_study(tmp_path, "tgi"))   # no registry names given: not checked here
    with pytest.raises(ServetuneError, match="engine.kind: unknown engine 'tgi'; known: sglang, vllm"):
        engine_for(spec.engine)


def test_a_registered_toy_engine_runs_a_whole_study(tmp_path: Path, engines: dict) -> None:
    built: list[CountingEngine] = []
    with fake_server(ttft_ms=1, itl_ms=1) as url:

        @register_engine("toy")
        class ToyEngine(CountingEngine):
            name = "toy"
            metric_names = TOY_METRICS
            profile = replace(registry.profile_for("vllm"), kind="toy", label="Toy", capabilities=frozenset())

            @classmethod
            def from_spec(cls, spec: EngineSpec) -> ToyEngine:
                engine = cls(url, facts_for=lambda config: BootFacts())
                built.append(engine)
                return engine

        spec = StudySpec.model_validate(_study(tmp_path, "toy"))
        runner = StudyRunner(spec, tmp_path / "study", display=StudyDisplay(Console(file=io.StringIO()),
                                                                             enabled=False))
        runner.run()

    (engine,) = built
    assert runner.engine is engine and runner.executor.engine is engine
    trials = runner.store.trials()
    assert [(t.role, t.outcome) for t in trials] == [("baseline", "ok"), ("candidate", "ok"), ("candidate", "ok")]
    assert [c.flags.get("max-num-seqs") for c in engine.started] == [None, 4, 8]
    runs = [r for t in trials for r in t.runs]
    assert len(runs) == 3 and all(r.ok and r.summary["completed"] == 2 for r in runs)
    assert engine.runs_started == 3  # the engine's own step between runs, not vLLM's cache reset
    # The server stats are read under the toy's names, none under vLLM's.
    assert all("peak_toy_running" in r.server_stats and "peak_running" not in r.server_stats for r in runs)
