"""Study conclusions from stored runs with known effects (the statistics, not the measuring)."""

from __future__ import annotations

import numpy as np

from servetune.load.records import RunResult
from servetune.store import StudyStore
from servetune.study import parse_study
from servetune.tune import analysis

STUDY = """
name: unit
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8, 16]}
scenarios:
  - {name: a, input_len: 8, output_len: 8, concurrency: 1, num_prompts: 4}
  - {name: b, input_len: 8, output_len: 8, concurrency: 2, num_prompts: 4}
objective: {maximize: output_throughput, slo: {p99_ttft_ms: 500}}
strategy: ofat
replicates: 4
"""


def _trial(store, spec, rng, role, params, mean, *, ttft=100.0, reps=4, noise=0.01):
    trial = store.begin_trial(role, spec.config_for(params), params)
    for rep in range(1, reps + 1):
        for scenario, scale in (("a", 1.0), ("b", 3.0)):
            value = scale * mean * (1 + noise * rng.standard_normal())
            store.record_run(trial.id, rep, RunResult(scenario=scenario, summary={
                "output_throughput": value, "p99_ttft_ms": ttft, "mean_ttft_ms": ttft / 2,
            }), started_at=0, ended_at=1)
    store.finish_trial(trial.id, "ok")
    return trial


def test_a_real_gain_wins_and_an_equal_config_does_not(tmp_path):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(7)
    _trial(store, spec, rng, "baseline", {}, 100)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 110)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 16}, 100)
    _trial(store, spec, rng, "baseline_final", {}, 100)
    _trial(store, spec, rng, "finalist", {"max-num-seqs": 8}, 110)

    assert analysis.pick_finalists(store, spec, 1) == [spec.config_for({"max-num-seqs": 8}).key()]
    result = analysis.analyze(store, spec)
    assert result.winner is not None and result.winner.params == {"max-num-seqs": 8}
    gain = result.winner.objective_effect
    assert gain.verdict == "better" and 7 < gain.effect_pct < 13 and gain.p_adjusted < 0.05
    equal = next(c for c in result.configs if c.params == {"max-num-seqs": 16})
    assert equal.objective_effect.verdict == "no_difference"
    assert equal.objective.low < 1.0 < equal.objective.high
    # per-scenario effects are in % of the baseline, with the right sign
    assert 5 < result.winner.scenarios["b"].effects["output_throughput"].effect_pct < 15
    assert result.baseline.objective.estimate == np.float64(result.baseline.objective.estimate)


def test_slo_breach_makes_a_faster_config_infeasible(tmp_path):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(1)
    _trial(store, spec, rng, "baseline", {}, 100)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 16}, 130, ttft=900)
    result = analysis.analyze(store, spec)
    fast = next(c for c in result.configs if not c.is_baseline)
    assert not fast.feasible and any("p99_ttft_ms" in v for v in fast.scenarios["a"].slo_violations)
    assert analysis.pick_finalists(store, spec, 2) == []
    views = analysis.history(store, spec)
    assert [v.feasible for v in views] == [True, False]


def test_drift_of_the_baseline_is_detected_and_corrected(tmp_path):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(3)
    # The machine slows down 10 % per baseline measurement; the candidate in between is equal.
    for i, role in enumerate(["baseline", "baseline_check", "baseline_check", "baseline_check"]):
        trial = _trial(store, spec, rng, role, {}, 100 * (1 - 0.1 * i), noise=0.002)
        store._conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (1000.0 * i, trial.id))
        if i == 1:
            cand = _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 85, noise=0.002)
            store._conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (1500.0, cand.id))
    measured = analysis._all_measured(store)
    reference = analysis._reference(measured, spec)
    assert reference.drift_detected == ["a", "b"]
    candidate = next(m for m in measured if m.trial.role == "candidate")
    samples = analysis.objective_samples(candidate, spec, reference)
    # Against the pooled mean (85) it would look equal by accident; against the trend at its time (85) too;
    # what matters: the reference follows the trend, not the pooled mean.
    assert abs(reference.at("a", 1500.0) - 85.0) < 1.5
    assert abs(np.mean(samples) - 1.0) < 0.03


def test_boots_not_replicates_decide_the_winner(tmp_path):
    """Replicates on one boot share its luck: a config that is equal to the baseline but was booted
    twice on lucky boots must not win against a baseline whose boots vary that much."""
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(11)
    for mean in (100, 88, 106):  # boot-to-boot swings of the machine, tight replicates within a boot
        _trial(store, spec, rng, "baseline" if mean == 100 else "baseline_final", {}, mean, noise=0.005)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 109, noise=0.005)
    _trial(store, spec, rng, "finalist", {"max-num-seqs": 8}, 111, noise=0.005)
    result = analysis.analyze(store, spec)
    lucky = next(c for c in result.configs if c.params == {"max-num-seqs": 8})
    assert lucky.objective_effect.unit == "boot" and len(lucky.boot_samples) == 2
    assert lucky.objective_effect.verdict == "no_difference"
    assert result.winner is None
    # the same samples judged replicate by replicate would have called it better
    from servetune import stats
    naive = stats.compare(result.baseline.objective_samples, lucky.objective_samples, higher_is_better=True)
    assert naive.p_value < 0.05
