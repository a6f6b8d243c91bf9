"""The study's memory bandwidth: measured once at its start, kept in the store's meta, not again
on resume; off by variable or study key; a failed measurement kept with its reason. The
measurement itself runs as a script in a subprocess."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from servetune.engine.bandwidth import measure_with
from servetune.engine.bootfacts import BootFacts
from servetune.store import meta
from servetune.store.sqlite import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune import bandwidth
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.counting_engine import CountingEngine
from tests.fakes.launch import fake_server


class Measure:
    def __init__(self, answer: dict[str, Any] | str) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, python: str, env: dict[str, str]) -> dict[str, Any] | str:
        self.calls.append((python, env))
        return self.answer


@pytest.fixture
def measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bandwidth.OFF_VARIABLE, raising=False)


def test_measured_once_with_the_slot_environment_and_kept(tmp_path: Path, measuring: None) -> None:
    store, notes = StudyStore.in_dir(tmp_path), []
    measure = Measure({"read_gbps": 4314.0, "device": "NVIDIA H200"})
    for _ in range(2):  # the second: a resumed study
        bandwidth.ensure_measured(store, ["python", "-m", "vllm.entrypoints.openai.api_server"],
                                  {"CUDA_VISIBLE_DEVICES": "3"}, enabled=True, note=notes.append, measure=measure)
    assert len(measure.calls) == 1
    python, env = measure.calls[0]
    assert python == sys.executable and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert bandwidth.stored(store) == {"read_gbps": 4314.0, "device": "NVIDIA H200"}
    assert notes == ["memory bandwidth 4314 GB/s read (NVIDIA H200)"]


def test_off_by_variable_or_study_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, measure = StudyStore.in_dir(tmp_path), Measure({"read_gbps": 1.0})
    monkeypatch.setenv(bandwidth.OFF_VARIABLE, "1")
    bandwidth.ensure_measured(store, ["python"], {}, enabled=True, note=print, measure=measure)
    monkeypatch.delenv(bandwidth.OFF_VARIABLE)
    bandwidth.ensure_measured(store, ["python"], {}, enabled=False, note=print, measure=measure)
    assert measure.calls == [] and store.get_meta_json(meta.BANDWIDTH) is None
    assert StudySpec.model_validate({"name": "s", "engine": {"model": "m"}, "scenarios": [{"preset": "chat"}],
                                     "measure_bandwidth": False}).measure_bandwidth is False


def test_a_failure_is_kept_with_its_reason_and_not_retried(tmp_path: Path, measuring: None) -> None:
    store, notes, measure = StudyStore.in_dir(tmp_path), [], Measure("python could not measure (no numpy)")
    for _ in range(2):
        bandwidth.ensure_measured(store, ["python"], {}, enabled=True, note=notes.append, measure=measure)
    assert len(measure.calls) == 1 and bandwidth.stored(store) is None
    assert store.get_meta_json(meta.BANDWIDTH) == {"unavailable": "python could not measure (no numpy)"}
    assert notes == ["memory bandwidth not measured: python could not measure (no numpy)"]


def test_the_script_measures_the_host_in_a_subprocess() -> None:
    answer = measure_with(sys.executable)
    assert isinstance(answer, dict), answer
    assert answer["read_gbps"] > 0 and answer["copy_gbps"] > 0 and answer["device"].startswith("cpu")


def test_an_interpreter_that_cannot_run_it_is_one_line() -> None:
    answer = measure_with("/nonexistent/python3")
    assert isinstance(answer, str) and "/nonexistent/python3" in answer


def test_a_study_measures_at_its_start_and_a_resumed_one_does_not(tmp_path: Path, measuring: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    measure = Measure({"read_gbps": 25.0, "device": "cpu"})
    monkeypatch.setattr(bandwidth, "measure_with", measure)
    spec = StudySpec.model_validate({
        "name": "bw", "engine": {"command": [sys.executable], "model": str(MODEL_WITHOUT_WEIGHTS)},
        "space": {"max-num-seqs": [4]},
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 2, "warmups": 0}],
        "strategy": "grid", "replicates": 1, "finalists": 0})
    with fake_server(ttft_ms=1, itl_ms=1) as url:
        engine = CountingEngine(url, facts_for=lambda config: BootFacts())
        monkeypatch.setattr("servetune.tune.runner.engine_for_study", lambda _spec: engine)
        for _ in range(2):
            runner = StudyRunner(spec, tmp_path / "study", display=StudyDisplay(Console(file=io.StringIO()),
                                                                                 enabled=False))
            runner.run()
    assert len(measure.calls) == 1
    assert bandwidth.stored(runner.store) == {"read_gbps": 25.0, "device": "cpu"}
