"""Study conclusions from stored runs with known effects (the statistics, not the measuring)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from servetune.analysis import analysis
from servetune.engine.placement import Placement
from servetune.load.records import RunResult
from servetune.report import write_report
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.vocabulary import Outcome

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


def _trial(store, spec, rng, role, params, mean, *, ttft=100.0, reps=4, noise=0.01, finish=True):
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params)
    for rep in range(1, reps + 1):
        for scenario, scale in (("a", 1.0), ("b", 3.0)):
            value = scale * mean * (1 + noise * rng.standard_normal())
            store.record_run(trial.id, rep, RunResult(scenario=scenario, summary={
                "output_throughput": value, "p99_ttft_ms": ttft, "mean_ttft_ms": ttft / 2,
            }), started_at=0, ended_at=1)
    if finish:
        store.finish_trial(trial.id, Outcome.ok)
    return trial


def _ofat_with_finalist(store, spec, rng, *, candidate, finalist, **finalist_kwargs):
    """Baseline, max-num-seqs 8 (mean `candidate`) and 16 (equal), the baseline's fresh boot, then
    max-num-seqs 8 as the finalist (mean `finalist`); returns the finalist's trial."""
    _trial(store, spec, rng, "baseline", {}, 100)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, candidate)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 16}, 100)
    _trial(store, spec, rng, "baseline_final", {}, 100)
    return _trial(store, spec, rng, "finalist", {"max-num-seqs": 8}, finalist, **finalist_kwargs)


def test_a_real_gain_wins_and_an_equal_config_does_not(tmp_path):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(7)
    _ofat_with_finalist(store, spec, rng, candidate=110, finalist=110)

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
    # the objective is a ratio to the baseline: the baseline's is 1, the winner's is 1 + its effect
    assert result.baseline.objective.estimate == 1.0
    assert result.winner.objective.estimate == pytest.approx(1.0 + gain.effect_pct / 100.0)


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
    # The machine slows down 10 % per baseline measurement (100, 90, 80, 70: pooled mean 85). The
    # candidate, booted early (t = 500, where the trend is at 95), runs exactly as the baseline would
    # then: corrected it is equal (ratio 1); against the pooled mean it would look 12 % better.
    for i, role in enumerate(["baseline", "baseline_check", "baseline_check", "baseline_check"]):
        trial = _trial(store, spec, rng, role, {}, 100 * (1 - 0.1 * i), noise=0.002)
        store._conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (1000.0 * i, trial.id))
        if i == 0:
            cand = _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 95, noise=0.002)
            store._conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (500.0, cand.id))
    measured = analysis._all_measured(store)
    references = analysis._reference(measured, spec)
    candidate = next(m for m in measured if m.trial.role == "candidate")
    reference = references.for_trial(candidate.trial)
    assert reference.drift_detected == ["a", "b"]
    assert reference.at("a", 500.0) == pytest.approx(95.0, abs=1.5)
    samples = analysis.objective_samples(candidate, spec, references)
    assert np.mean(samples) == pytest.approx(1.0, abs=0.03)
    # and the verdict: not better than the baseline, although it beats the baseline's pooled mean
    result = analysis.analyze(store, spec)
    assert next(c for c in result.configs if not c.is_baseline).objective.estimate == pytest.approx(1.0, abs=0.03)


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


def _boot_spread_study(tmp_path, candidate_mean, alpha=0.05):
    """A baseline booted three times with boot means spreading 0.87-1.09 (as the CPU box shows), tight
    replicates within each boot, and one candidate measured on a single boot."""
    spec = parse_study(STUDY + f"alpha: {alpha}\n")
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(13)
    for role, mean in (("baseline", 100), ("baseline_check", 87), ("baseline_final", 109)):
        _trial(store, spec, rng, role, {}, mean, noise=0.005)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, candidate_mean, noise=0.005)
    return spec, store


@pytest.mark.parametrize("candidate_mean", [125, 78])
def test_a_single_boot_with_a_large_replicate_effect_is_not_better_or_worse(tmp_path, candidate_mean):
    spec, store = _boot_spread_study(tmp_path, candidate_mean)
    result = analysis.analyze(store, spec)
    single = next(c for c in result.configs if not c.is_baseline)
    effect = single.objective_effect
    assert effect.unit == "single_boot"
    assert effect.verdict in ("promising", "not_promising", "no_difference"), effect
    assert effect.p_value > 0.05       # the boot-to-boot spread is in its error: no significance either
    assert result.winner is None
    # replicate by replicate, the same samples would have looked significant
    from servetune import stats
    naive = stats.compare(result.baseline.objective_samples, single.objective_samples, higher_is_better=True)
    assert naive.p_value < 0.05


def test_the_baseline_objective_is_exactly_one(tmp_path):
    """Against a drift-corrected reference the baseline's own samples do not average to 1; its row is
    the reference, so it is 1 by construction, and the report shows it so."""
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(3)
    for i, role in enumerate(["baseline", "baseline_check", "baseline_check", "baseline_final"]):
        trial = _trial(store, spec, rng, role, {}, 100 * (1 - 0.1 * i) + (5 if i == 2 else 0), noise=0.01)
        store._conn.execute("UPDATE trials SET started_at = ? WHERE id = ?", (1000.0 * i, trial.id))
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 90, noise=0.01)
    result = analysis.analyze(store, spec)
    assert np.mean(result.baseline.objective_samples) != 1.0      # what the row used to show
    assert result.baseline.objective.estimate == 1.0
    md = write_report(result, store, tmp_path / "report")["markdown"].read_text()
    assert "| baseline | ok | 4 | 1 | – |" in md


def test_interval_level_follows_alpha(tmp_path):
    from servetune import stats
    spec, store = _boot_spread_study(tmp_path, 104, alpha=0.1)
    result = analysis.analyze(store, spec)
    assert result.confidence == pytest.approx(0.9)
    base = result.baseline.scenarios["a"].metrics["output_throughput"]
    name = ("a", "output_throughput")
    groups: dict[str, list] = {}
    for m in analysis._all_measured(store):
        groups.setdefault(m.trial.config.key(), []).append(m)
    boots = {k: analysis._metric_boots(g, analysis.REPORTED_METRICS) for k, g in groups.items()}
    pooled = analysis._metric_components(boots, {k: analysis._metric_censoring(g, analysis.REPORTED_METRICS) for k, g in groups.items()})[name]
    # A config's interval rests on the study's pooled boot variance (log scale), at the study's alpha.
    own = boots[spec.baseline_config().key()][name]
    half = stats.log_mean_se(own, pooled) * scipy_stats.t.ppf(0.95, pooled.boot_df)
    mean = np.mean([x for boot in own for x in boot])
    assert (base.low, base.high) == pytest.approx((mean * np.exp(-half), mean * np.exp(half)))
    effect = next(c for c in result.configs if not c.is_baseline).objective_effect
    at_95 = stats.compare_boots(result.baseline.objective_boots, next(
        c for c in result.configs if not c.is_baseline).objective_boots, result.components, higher_is_better=True)
    assert effect.ci_high_pct - effect.ci_low_pct < at_95.ci_high_pct - at_95.ci_low_pct
    md = write_report(result, store, tmp_path / "report")["markdown"].read_text()
    assert "Intervals are 90 % confidence intervals" in md and "effect (90 % CI)" in md and "95 %" not in md


def test_status_prints_the_power_of_the_study(tmp_path):
    from cli_run import servetune
    spec, store = _boot_spread_study(tmp_path, 104)
    store.set_meta_json("spec", spec.model_dump(mode="json"))
    power = analysis.study_power(store, spec)
    assert power.components.boot_df == 2 and power.baseline_boots == 3
    assert power.boots_for_target is not None and power.boots_for_target > 1   # boot sd ~ 11 %
    out = servetune("status", tmp_path)
    assert out.code == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"from ±{power.detectable_pct:.1f} %" in text
    assert f"10 % needs {power.boots_for_target} boot(s) of 4 replicate(s)" in text


def _on_slot(store, trial, slot, started_at):
    store._conn.execute("UPDATE trials SET slot = ?, started_at = ? WHERE id = ?", (slot, started_at, trial.id))


def test_each_slot_is_compared_with_the_baseline_measured_on_it(tmp_path):
    """Slot 1 is 20 % slower as a whole (another GPU). A candidate equal to the baseline, measured on
    slot 1, is equal against slot 1's baseline; against a pooled baseline it would look 10 % worse."""
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(11)
    for slot, speed in ((0, 1.0), (1, 0.8)):
        for i, role in enumerate(("baseline", "baseline_check")):
            _on_slot(store, _trial(store, spec, rng, role, {}, 100 * speed, noise=0.002), slot, 100.0 * i)
    equal = _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 80, noise=0.002)
    _on_slot(store, equal, 1, 50.0)
    measured = analysis._all_measured(store)
    references = analysis._reference(measured, spec)
    samples = analysis.objective_samples(next(m for m in measured if m.trial.id == equal.id), spec, references)
    assert abs(np.mean(samples) - 1.0) < 0.02
    assert abs(references.pooled.at("a", 50.0) - 90.0) < 1.0  # what a pooled reference would divide by
    result = analysis.analyze(store, spec)
    cand = next(c for c in result.configs if not c.is_baseline)
    assert cand.objective_effect.verdict == "no_difference"


def test_status_shows_which_slot_measured_each_trial_once_there_are_several(tmp_path):
    from cli_run import servetune
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    store.set_meta_json("spec", spec.model_dump(mode="json"))
    rng = np.random.default_rng(3)
    first = _trial(store, spec, rng, "baseline", {}, 100, noise=0.01)
    assert "slot" not in servetune("status", tmp_path).stdout   # one place: no column
    second = _trial(store, spec, rng, "baseline", {}, 100, noise=0.01)
    _on_slot(store, second, 1, 10.0)
    store.move_trial(second.id, slot=1, placement=Placement(1, where={"node": "gpu-b (10.0.0.2)"}))
    out = servetune("status", tmp_path)
    assert out.code == 0, out.stderr
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if line.count("│") > 3}
    assert "slot" in out.stdout and "gpu-b (10.0.0.2)" in rows[str(second.seq)], out.stdout
    assert rows[str(first.seq)].split("│")[4].strip() == "0"   # #, role, config, then the slot


def test_per_gpu_compares_what_each_gpu_serves(tmp_path):
    """Tensor parallel 2 at 1.5 times the throughput: better as a server, worse per GPU."""
    text = (STUDY.replace("space: {max-num-seqs: [4, 8, 16]}", "space: {tensor-parallel-size: [null, 2]}")
            .replace("objective: {maximize: output_throughput,", "objective: {maximize: output_throughput, per_gpu: true,"))
    verdicts = {}
    for per_gpu in (False, True):
        spec = parse_study(text if per_gpu else text.replace(" per_gpu: true,", ""))
        store = StudyStore.in_dir(tmp_path / str(per_gpu))
        rng = np.random.default_rng(3)
        _trial(store, spec, rng, "baseline", {}, 100)
        _trial(store, spec, rng, "candidate", {"tensor-parallel-size": 2}, 150)
        _trial(store, spec, rng, "baseline_final", {}, 100)
        _trial(store, spec, rng, "finalist", {"tensor-parallel-size": 2}, 150)
        result = analysis.analyze(store, spec)
        tp2 = next(c for c in result.configs if not c.is_baseline)
        verdicts[per_gpu] = (tp2.objective.estimate, tp2.objective_effect.verdict)
        # the raw metric's effect is the server's either way
        assert 45 < tp2.scenarios["a"].effects["output_throughput"].effect_pct < 55
        assert result.objective_name == ("output_throughput per GPU" if per_gpu else "output_throughput")
    assert verdicts[False][0] == pytest.approx(1.5, rel=0.03) and verdicts[False][1] == "better"
    assert verdicts[True][0] == pytest.approx(0.75, rel=0.03) and verdicts[True][1] == "worse"


def test_per_gpu_is_refused_for_a_latency():
    with pytest.raises(Exception, match="per_gpu divides a throughput or a capacity"):
        parse_study(STUDY.replace("objective: {maximize: output_throughput,",
                                  "objective: {minimize: p99_ttft_ms, per_gpu: true,"))


def test_a_study_stopped_in_its_finalist_trial_has_no_verdict_yet(tmp_path):
    """Before the finalist's fresh boot has ended, the report must not say that nothing beat the
    baseline: the verdict is pending, and the unfinished trial is named."""
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    rng = np.random.default_rng(7)
    stopped = _ofat_with_finalist(store, spec, rng, candidate=103, finalist=97, reps=2, finish=False)

    result = analysis.analyze(store, spec)
    assert result.winner is None
    finalist = next(c for c in result.configs if c.params == {"max-num-seqs": 8})
    assert finalist.unfinished_trial_ids == [stopped.id] and finalist.ok  # its first boot ended ok
    md = write_report(result, store, tmp_path / "report")["markdown"].read_text()
    assert f"No verdict yet: trial(s) #{stopped.id} unfinished" in md
    assert "No config beat the baseline" not in md
    assert "so far: no config beat the baseline significantly after re-validation" in md
    assert "## Recommended config so far (the baseline: nothing beat it yet, the study is unfinished)" in md

    store.finish_trial(stopped.id, Outcome.ok)
    md = write_report(analysis.analyze(store, spec), store, tmp_path / "report")["markdown"].read_text()
    assert "No verdict yet" not in md
