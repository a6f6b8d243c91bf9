"""Deployment profiles (analysis/profiles.py): a study file's `profiles:` checked with file, line and key;
each profile's winner named from the study's runs by the study's own verdict rule and SLO proof,
and one deployment written per profile, beside the Pareto front of their two objectives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_run import assert_one_line_error, servetune

from servetune.analysis import analysis
from servetune.analysis.profiles import analyze_profiles
from servetune.errors import ServetuneError
from servetune.load.records import RunResult
from servetune.report import write_report
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.study.spec import StudySpec
from servetune.tune.identity import check_same_study
from servetune.vocabulary import Outcome

STUDY = """\
name: unit
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8, 16]}
scenarios:
  - {name: a, input_len: 8, output_len: 8, concurrency: 1, num_prompts: 4}
  - {name: b, input_len: 8, output_len: 8, concurrency: 2, num_prompts: 4}
objective: {maximize: output_throughput, slo: {p99_ttft_ms: 500}}
strategy: ofat
finalists: 2
replicates: 4
"""
PROFILES = """\
profiles:
  throughput: {maximize: output_throughput, slo: {p99_ttft_ms: 500}}
  latency: {minimize: mean_ttft_ms, slo: {mean_ttft_ms: %s}}
"""
# (output throughput, TTFT): max-num-seqs 8 has 10 % more throughput and about the baseline's TTFT;
# 16 about the baseline's throughput at half its TTFT. Each is a little ahead on its weaker metric
# too, so that both dominate the baseline.
SPEEDS = {(): (100.0, 100.0), (8,): (110.0, 98.0), (16,): (102.0, 50.0)}


def _spec(latency_limit: float = 80) -> StudySpec:
    return parse_study(STUDY + PROFILES % latency_limit, "study.yaml")


def _trial(store: StudyStore, spec: StudySpec, rng: np.random.Generator, role: str, seqs: tuple[int, ...]) -> None:
    params = {"max-num-seqs": seqs[0]} if seqs else {}
    throughput, ttft = SPEEDS[seqs]
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params)
    for rep in range(1, 5):
        for scenario in ("a", "b"):
            store.record_run(trial.id, rep, RunResult(scenario=scenario, summary={
                "output_throughput": throughput * (1 + 0.01 * rng.standard_normal()),
                "p99_ttft_ms": 2 * ttft, "p90_ttft_ms": 1.5 * ttft,
                "mean_ttft_ms": ttft * (1 + 0.01 * rng.standard_normal()),
            }), started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)


def _study(root: Path, spec: StudySpec) -> StudyStore:
    """Baseline, both candidates screened, a fresh baseline and both re-validated as finalists."""
    store = StudyStore.in_dir(root)
    store.set_spec_doc(spec.model_dump(mode="json"))
    rng = np.random.default_rng(5)
    for role, seqs in (("baseline", ()), ("candidate", (8,)), ("candidate", (16,)), ("baseline_final", ()),
                       ("finalist", (8,)), ("finalist", (16,))):
        _trial(store, spec, rng, role, seqs)
    return store


def test_each_profile_gets_its_own_winner_under_the_studys_verdict_rule(tmp_path: Path) -> None:
    spec = _spec()
    store = _study(tmp_path, spec)
    study = analysis.analyze(store, spec)
    profiles = analyze_profiles(store, spec)
    assert list(profiles) == ["throughput", "latency"]
    assert study.winner is not None and study.winner.params == {"max-num-seqs": 8}
    assert profiles["throughput"].winner is not None and profiles["throughput"].winner.params == {"max-num-seqs": 8}
    latency = profiles["latency"]
    assert latency.winner is not None and latency.winner.params == {"max-num-seqs": 16}
    effect = latency.winner.objective_effect
    assert effect is not None and effect.verdict == "better" and effect.unit == "boot"
    assert effect.p_adjusted is not None and effect.p_adjusted < spec.alpha   # selection-calibrated
    assert 90 < effect.effect_pct < 110          # half the TTFT: the ratio baseline / config doubles
    # the profile's own SLO, proven on the winner's runs
    assert {(c.metric, c.state) for c in latency.winner.slo_checks} == {("mean_ttft_ms", "met")}


def test_one_deployment_per_profile_and_the_pareto_front_of_their_objectives(tmp_path: Path) -> None:
    spec = _spec()
    store = _study(tmp_path / "study", spec)
    paths = write_report(analysis.analyze(store, spec), store, tmp_path / "report", analyze_profiles(store, spec))
    latency = (tmp_path / "report" / "profiles" / "latency" / "winner" / "serve.sh").read_text()
    throughput = (tmp_path / "report" / "profiles" / "throughput" / "winner" / "serve.sh").read_text()
    assert "--max-num-seqs 16" in latency and "--max-num-seqs 8" in throughput
    assert paths["profile:latency:winner:command"].parent == tmp_path / "report" / "profiles" / "latency" / "winner"
    md = paths["markdown"].read_text()
    assert "### Profile latency: minimize mean_ttft_ms" in md
    assert "### Profile throughput: maximize output_throughput" in md
    assert "a: mean_ttft_ms" in md and "≤ 80, met" in md                  # the evidence: its SLO, met
    front = md[md.index("## Pareto front"):]
    assert "`output_throughput` against `mean_ttft_ms`" in front           # the two profiles' objectives
    assert "| max-num-seqs=16 |" in front and "| front | latency |" in front
    assert "| front | winner, throughput |" in front
    assert "Dominated: baseline (by max-num-seqs=8, max-num-seqs=16)" in front
    assert paths["plot:pareto_front"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Profiles" in paths["html"].read_text()


def test_a_profile_whose_slo_no_config_meets_gets_the_baseline(tmp_path: Path) -> None:
    spec = _spec(latency_limit=40)   # 16's mean TTFT is 50: better than the baseline, but over the limit
    store = _study(tmp_path / "study", spec)
    profiles = analyze_profiles(store, spec)
    latency = profiles["latency"]
    fastest = next(c for c in latency.configs if c.params == {"max-num-seqs": 16})
    assert fastest.slo_state == "violated" and not fastest.feasible     # the SLO proof of the profile's limit
    assert latency.winner is None and "no config beat the baseline" in latency.winner_reason
    paths = write_report(analysis.analyze(store, spec), store, tmp_path / "report", profiles)
    assert (tmp_path / "report" / "profiles" / "latency" / "baseline" / "serve.sh").is_file()
    assert not (tmp_path / "report" / "profiles" / "latency" / "winner").exists()
    assert "Deployment: the baseline" in paths["markdown"].read_text()


def test_a_study_without_profiles_reports_as_before(tmp_path: Path) -> None:
    spec = parse_study(STUDY)
    assert spec.profiles == {} and analyze_profiles(StudyStore.in_dir(tmp_path / "s"), spec) == {}
    assert analysis.metric_names(spec) == analysis.REPORTED_METRICS   # p99_ttft_ms, its SLO, among them
    store = _study(tmp_path / "study", spec)
    paths = write_report(analysis.analyze(store, spec), store, tmp_path / "report")
    assert "## Profiles" not in paths["markdown"].read_text()
    assert not (tmp_path / "report" / "profiles").exists()


def test_profiles_may_be_added_to_a_study_that_has_trials(tmp_path: Path) -> None:
    store = _study(tmp_path, parse_study(STUDY))
    notes: list[str] = []
    check_same_study(store, _spec(), notes.append)     # no "different study" error, nothing replaced
    assert notes == []


@pytest.mark.parametrize(("profiles", "where", "what"), [
    ("  ../x: {minimize: p90_ttft_ms}\n", "study.yaml:12: profiles.'../x'", "names a folder of the report"),
    ("  latency: {minimize: p90_ttfy_ms}\n", "study.yaml:12: profiles.latency.minimize",
     "did you mean 'p90_ttft_ms'"),
    ("  latency:\n    minimize: mean_ttft_ms\n    weights: {c: 1}\n", "study.yaml:14: profiles.latency.weights.c",
     "no scenario named 'c'"),
    ("  latency: {minimize: mean_ttft_ms, slo: {p90_ttft_ms: -1}}\n", "profiles.latency.slo.p90_ttft_ms",
     "positive number"),
    ("  cheap: {maximize: capacity}\n", "profiles.cheap.maximize", "capacity is measured by a maximize: capacity"),
    ("  good: {maximize: request_goodput, slo: {p99_ttft_ms: 100}}\n", "profiles.good.slo",
     "counted against the objective's per-request SLOs"),
    ("  latency: {minimize: mean_ttft_ms, typo: 1}\n", "profiles.latency.typo", "unknown key 'typo'"),
])
def test_a_bad_profile_is_one_line_naming_file_line_and_key(profiles: str, where: str, what: str) -> None:
    with pytest.raises(ServetuneError) as caught:
        parse_study(STUDY + "profiles:\n" + profiles, "study.yaml")
    message = str(caught.value)
    assert where in message and what in message, message


def test_a_capacity_study_takes_no_profiles() -> None:
    capacity = STUDY.replace("objective: {maximize: output_throughput, slo: {p99_ttft_ms: 500}}",
                             "objective: {maximize: capacity, slo: {p50_ttft_ms: 500}}")
    with pytest.raises(ServetuneError, match=r"profiles.fast: a maximize: capacity study"):
        parse_study(capacity + "capacity: {num_prompts: 400}\nprofiles:\n  fast: {minimize: mean_ttft_ms}\n",
                    "study.yaml")


def test_servetune_pareto_prints_the_front_and_writes_its_plot(tmp_path: Path) -> None:
    store = _study(tmp_path / "study", _spec())
    store.close()
    done = servetune("pareto", tmp_path / "study", "--x", "p90_ttft_ms", "--y", "output_throughput",
                     "--scenario", "b", "--plot", tmp_path / "front.png")
    assert done.code == 0, done.stdout + done.stderr
    assert "dominated by" in done.stdout and "latency" in done.stdout
    assert str(tmp_path / "front.png") in "".join(done.stdout.split())   # rich wraps a long path anywhere
    assert " a:" not in done.stdout                    # only the scenario asked for
    assert (tmp_path / "front.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_one_line_error(servetune("pareto", tmp_path / "study", "--x", "p90_ttfy_ms", "--y", "objective"),
                          "--x", "did you mean 'p90_ttft_ms'")
    assert_one_line_error(servetune("pareto", tmp_path / "study", "--x", "objective", "--y", "objective",
                                    "--scenario", "a"), "--x and --y")
    assert_one_line_error(servetune("pareto", tmp_path / "study", "--x", "p90_ttft_ms", "--y", "objective",
                                    "--scenario", "c"), "--scenario 'c'")
    # the runs have no energy: no result, exit 1, and no plot written
    none = servetune("pareto", tmp_path / "study", "--x", "joules_per_token", "--y", "output_throughput",
                     "--plot", tmp_path / "none.png")
    assert none.code == 1 and "no config that ran has a value" in none.stderr and not (tmp_path / "none.png").exists()
