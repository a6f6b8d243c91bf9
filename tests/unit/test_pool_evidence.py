"""Evidence before boots: a candidate that only grows the KV pool is not booted when every run of
the config it grows showed no preemption and low KV use (the GB10 report's 0.45 -> 0.55: a pool
of 174k tokens grown to 467k changed nothing); the plan says so beforehand."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.analysis import known, pool_evidence
from servetune.engine.config import Config
from servetune.engine.defaults import EngineDefaults
from servetune.load.records import RunResult
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.tune.plan import planned_candidates
from servetune.vocabulary import Outcome

BASE = Config.of({"gpu-memory-utilization": 0.45, "max-num-seqs": 32})
MORE = Config.of({"gpu-memory-utilization": 0.55, "max-num-seqs": 32})
ROOMY = {"preemptions": 0.0, "peak_kv_cache_usage": 0.23}


def _measured(tmp_path: Path, stats: dict[str, dict[str, float]], config: Config = BASE) -> StudyStore:
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.baseline, config, {})
    for scenario, scraped in stats.items():
        store.record_run(trial.id, 1, RunResult(scenario=scenario, summary={"output_throughput": 70.0},
                                                server_stats=scraped), started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)
    return store


def test_a_larger_pool_than_every_run_needed_is_skipped_with_its_reason(tmp_path: Path) -> None:
    store = _measured(tmp_path, {"kie": ROOMY, "chat": {"preemptions": 0.0, "peak_kv_cache_usage": 0.11}})
    decided = known.before_boot(store, MORE, BASE, EngineDefaults())
    assert decided == (Outcome.skipped,
                       "raises only the KV pool (--gpu-memory-utilization 0.45 -> 0.55) over the baseline (#1), "
                       "whose 2 run(s) of chat, kie: no preemption, peak KV usage at most 23% (below 60%): "
                       "a larger pool buys nothing at this load")


@pytest.mark.parametrize("stats", [
    {"kie": ROOMY, "chat": {"preemptions": 3.0, "peak_kv_cache_usage": 0.4}},    # a preemption
    {"kie": ROOMY, "chat": {"preemptions": 0.0, "peak_kv_cache_usage": 0.85}},   # a pool filling up
    {"kie": ROOMY, "chat": {}},                                                 # no /metrics: no evidence
])
def test_a_tight_or_unscraped_pool_boots_the_larger_one(tmp_path: Path, stats: dict) -> None:
    assert known.before_boot(_measured(tmp_path, stats), MORE, BASE, EngineDefaults()) is None


def test_only_a_candidate_that_grows_the_pool_and_nothing_else_is_skipped(tmp_path: Path) -> None:
    store = _measured(tmp_path, {"kie": ROOMY})
    defaults = EngineDefaults()
    less = Config.of({"gpu-memory-utilization": 0.40, "max-num-seqs": 32})
    also_seqs = Config.of({"gpu-memory-utilization": 0.55, "max-num-seqs": 64})
    by_bytes = Config.of({"gpu-memory-utilization": 0.45, "max-num-seqs": 32, "kv-cache-memory-bytes": "8GiB"})
    assert known.before_boot(store, less, BASE, defaults) is None
    assert known.before_boot(store, also_seqs, BASE, defaults) is None
    assert known.before_boot(store, by_bytes, BASE, defaults) is None  # unset bytes: not comparable
    # an unset share is the installed engine's default (vLLM 0.32: 0.92); unknown, nothing is compared
    vllm032 = EngineDefaults(known=True, values={"gpu-memory-utilization": 0.92})
    assert pool_evidence.raised_pool(Config.of({"gpu-memory-utilization": 0.95}), Config.of({}), vllm032) == \
        ["--gpu-memory-utilization 0.92 -> 0.95"]
    assert pool_evidence.raised_pool(Config.of({"gpu-memory-utilization": 0.91}), Config.of({}), vllm032) is None
    assert pool_evidence.raised_pool(Config.of({"gpu-memory-utilization": 0.95}), Config.of({}), defaults) is None


def test_the_plan_names_the_condition_under_which_it_boots() -> None:
    spec = parse_study("name: p\nengine: {model: m, args: {gpu-memory-utilization: 0.45}}\n"
                       "space: {gpu-memory-utilization: [0.55], max-num-seqs: [8]}\nscenarios: [{preset: chat}]\n")
    by_label = {c.label: c for c in planned_candidates(spec, EngineDefaults())}
    assert by_label["gpu-memory-utilization=0.55"].only_if == (
        "only if the baseline's runs show a tight KV pool (a preemption or peak KV usage >= 60%); it raises "
        "--gpu-memory-utilization 0.45 -> 0.55")
    assert by_label["max-num-seqs=8"].only_if is None


def test_the_report_lists_the_skipped_candidate_with_its_reason(tmp_path: Path) -> None:
    from servetune.analysis import analysis
    from servetune.report.context import build
    from servetune.report.markdown import render_markdown

    spec = parse_study("name: p\nengine: {model: m, args: {gpu-memory-utilization: 0.45, max-num-seqs: 32}}\n"
                       "space: {gpu-memory-utilization: [0.55]}\n"
                       "scenarios: [{name: kie, input_len: 8, output_len: 4, num_prompts: 2}]\n")
    store = _measured(tmp_path, {"kie": ROOMY}, spec.baseline_config())
    candidate = spec.config_for({"gpu-memory-utilization": 0.55})
    trial = store.begin_trial(TrialRole.candidate, candidate, {"gpu-memory-utilization": 0.55})
    decided = known.before_boot(store, candidate, spec.baseline_config(), EngineDefaults(), excluding=trial.id)
    assert decided is not None
    store.finish_trial(trial.id, decided[0], detail=decided[1])
    data = build(analysis.analyze(store, spec), store)
    markdown = render_markdown(data, {p.name: f"{p.name}.png" for p in data.plots})
    assert ("**Trial 2 (gpu-memory-utilization=0.55): skipped** — raises only the KV pool "
            "(--gpu-memory-utilization 0.45 -> 0.55) over the baseline (#1)") in markdown
