"""A study that maximizes capacity on a trace: each config's capacity is a speed-up of the
recorded traffic, searched on FAKE servers of known capacity (as test_capacity_study.py), and
its report shows how faithfully every run replayed the trace."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from servetune.analysis import capacity_runs, known
from servetune.report.context import build as build_report_data
from servetune.report.write import write_report
from servetune.study.spec import SpecError
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes.counting_engine import CPU_DEFAULTS
from tests.unit.test_capacity_study import SLOTS, SlotsEngine, _servers, _spec

pytestmark = pytest.mark.slow
MOONCAKE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "mooncake-excerpt.jsonl"
TRACE = {"path": str(MOONCAKE), "duration_s": 15, "token_scale": 1 / 128, "block_size": 512, "speedup": 4}
# The trace's bursts (16 requests in one millisecond) queue on 2 slots at any speed-up: their mean
# TTFT was 190-240 ms from 0.125 to 4 times the recorded speed; on 8 slots 75-85 ms up to 32 times.


def test_a_capacity_study_on_a_trace_names_the_config_that_holds_more_of_it(tmp_path: Path) -> None:
    spec = _spec(tmp_path, scenarios=[{"name": "mooncake", "warmups": 0, "trace": TRACE}],
                 objective={"maximize": "capacity", "slo": {"mean_ttft_ms": 300}},
                 capacity={"num_prompts": 40, "rel_tol": 0.25, "max_levels": 6, "max_runs_per_level": 1})
    with _servers() as urls:
        runner = StudyRunner(spec, tmp_path / "study", display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
        runner.store.set_meta_json(known.DEFAULTS_META, CPU_DEFAULTS.model_dump(mode="json"))
        engine = SlotsEngine(urls)
        facts_for = engine.facts_for   # and a KV pool that holds every run: the implied hits expected
        engine.facts_for = lambda config: facts_for(config).model_copy(update={"kv_cache_tokens": 1_000_000})
        runner.engine = runner.executor.engine = engine
        result = runner.run()
    store = runner.store
    for trial in store.trials():
        levels = [r for r in store.runs(trial.id) if capacity_runs.is_level_run(r.summary)]
        assert levels and all(r.summary["load"] == "speedup" for r in levels)
        assert all(r.summary["prefix_hit_rate_pool"] == r.summary["prefix_hit_rate_implied"] for r in levels)
        assert levels[0].summary["load_level"] == 4 and all(r.summary["trace_speedup"] == r.summary["load_level"]
                                                           for r in levels)
    assert result.winner is not None and result.winner.config.flags["max-num-seqs"] == SLOTS[1], result.winner_reason
    data = build_report_data(result, store)
    assert data.capacity is not None and {row.unit for row in data.capacity.rows} == {"x the recorded traffic"}
    assert data.fidelity and all(f.scenario == "mooncake" and f.prompts_off.startswith("0 of ") for f in data.fidelity)
    assert all(f.hit_pool is not None and f.hit_pool == f.hit_implied for f in data.fidelity)
    markdown = write_report(result, store, tmp_path / "report")["markdown"].read_text()
    assert "## Replay fidelity" in markdown and "| mooncake |" in markdown


def test_a_trace_study_checks_its_file_and_its_window_before_any_boot(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"scenarios\[0\]\.trace\.path: cannot read trace .*missing\.jsonl: No such file"):
        _spec(tmp_path, scenarios=[{"name": "t", "trace": {"path": str(tmp_path / "missing.jsonl")}}])
    with pytest.raises(SpecError, match=r"the trace's 65 requests cannot show p99_ttft_ms met at alpha 0.05"):
        _spec(tmp_path, scenarios=[{"name": "t", "trace": {"path": str(MOONCAKE), "duration_s": 20}}],
              objective={"maximize": "capacity", "slo": {"p99_ttft_ms": 100}})


def test_a_study_files_relative_trace_path_is_read_from_the_study_files_folder(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from servetune.capacity.http import at_level
    from servetune.load.trace.window import load_replay
    from servetune.study.loader import load_study

    study_dir = tmp_path / "studies"
    (study_dir / "traces").mkdir(parents=True)
    (study_dir / "traces" / "window.jsonl").write_bytes(MOONCAKE.read_bytes())
    (study_dir / "s.yaml").write_text(
        "name: s\nengine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m}\n"
        "space: {max-num-seqs: [8, 16]}\n"
        "scenarios:\n  - {name: t, trace: {path: traces/window.jsonl, duration_s: 15}}\n")
    monkeypatch.chdir(tmp_path)   # not the study's folder: `traces/window.jsonl` is not here
    spec = load_study(study_dir / "s.yaml")
    trace = spec.scenarios[0].trace
    assert trace is not None and trace.file == study_dir / "traces" / "window.jsonl"
    assert load_replay(trace).requests
    level = at_level(spec.scenarios[0], "speedup", 2.0, 0, 1)   # a capacity level's scenario reads it too
    assert level.trace is not None and level.trace.speedup == 2.0 and load_replay(level.trace).requests
    assert spec.model_dump(mode="json")["scenarios"][0]["trace"]["path"] == "traces/window.jsonl"
