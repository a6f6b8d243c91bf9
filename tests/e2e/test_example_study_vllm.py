"""The main job's study (the `example_study` fixture, examples/tiny-cpu.yaml with a smaller space)
on the real vLLM CPU build, and what is made of it: the study's shape and verdict, the report with
every section and real numbers, its two profiles' deployments and Pareto front, the HTML in
Chromium, and the emitted `vllm serve` command started for real with the applied check matching.

The tests of one study are in one file: the suite's concurrent run hands out whole files
(`--dist loadfile`), so the session fixture's study runs once, on one worker."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from servetune.analysis import analysis
from servetune.analysis.ofat_audit import off_one_factor
from servetune.analysis.profiles import analyze_profiles
from servetune.engine import VllmEngine
from servetune.engine.config import Config, render_flags
from servetune.store import StudyStore, TrialRole
from servetune.study import load_study
from tests.conftest import REPO, servetune
from tests.unit.report_study import chromium_check

pytestmark = [pytest.mark.vllm, pytest.mark.concurrent]
SECTIONS = ("## Headline", "config", "## Trials", "## Per-parameter effects", "## Plots",
            "## Server-side evidence", "## Study cost")


EXAMPLE_STUDY = REPO / "examples" / "tiny-cpu.yaml"
# The main job's study with a smaller space: every code path of its 13-boot run (OFAT steps that
# move the incumbent or not, the prefix-caching candidate equal to vLLM's default recorded as a
# duplicate, a finalist on a fresh boot beside a fresh baseline, the verdict, the report) in about
# half the boots, which CI's 90 minutes on 2 cores cannot spare twice. One re-validation pair at
# most: more (up to the default 5 boots) depend on this machine's noise, 5 to 9 boots a run; the
# looks beyond the first are the stand-in studies' subject (tests/unit/test_tune_standin_verdicts.py).
EXAMPLE_SMALLER = {"space": {"max-num-seqs": [32], "enable-prefix-caching": [True, False]}, "finalists": 1,
                   "revalidation": {"max_boots": 2}}


@dataclass(frozen=True)
class ExampleStudy:
    out: Path         # the study directory (store, report, recommended config)
    study_file: Path  # the study YAML it ran


@pytest.fixture(scope="module")
def example_study(tmp_path_factory: pytest.TempPathFactory) -> ExampleStudy:
    """The main job's study (examples/tiny-cpu.yaml, EXAMPLE_SMALLER's keys replaced) run by the
    `servetune` command on the real CPU vLLM; shared by this file's tests."""
    doc = yaml.safe_load(EXAMPLE_STUDY.read_text())
    assert set(EXAMPLE_SMALLER["space"]) <= set(doc["space"])  # a subset of the main job's own space
    study_file = tmp_path_factory.mktemp("study") / EXAMPLE_STUDY.name
    study_file.write_text(yaml.safe_dump({**doc, **EXAMPLE_SMALLER}, sort_keys=False))
    out = tmp_path_factory.mktemp("tiny-cpu")
    done = servetune("tune", str(study_file), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return ExampleStudy(out=out, study_file=study_file)


def _recommended(study: ExampleStudy) -> tuple[Path, Config]:
    result = analysis.analyze(StudyStore.open_existing(study.out), load_study(study.study_file))
    chosen = result.winner or result.baseline
    assert chosen is not None
    return study.out / ("winner" if result.winner else "baseline"), chosen.config


# Its checks are of the study's shape, not of who won.
def test_example_study_runs_to_a_verdict(example_study: ExampleStudy) -> None:
    spec = load_study(example_study.study_file)
    store = StudyStore.open_existing(example_study.out)
    trials = store.trials()
    assert trials[0].role == "baseline" and trials[0].outcome == "ok"
    assert all(t.status == "done" for t in trials)
    candidates = [t for t in trials if t.role == "candidate"]
    assert 1 <= len(candidates) <= spec.budget.trials
    # OFAT changes one parameter at a time from the incumbent of its time
    baseline = spec.baseline_config()
    assert off_one_factor(store, spec) == []
    # enable-prefix-caching=True is what vLLM 0.32 runs when the flag is unset: never booted again
    duplicates = [t for t in candidates if t.outcome == "duplicate"]
    assert any(t.params.get("enable-prefix-caching") is True and t.launch_token is None
               and "enable-prefix-caching=True is vLLM's default here" in (t.detail or "") for t in duplicates)
    assert all(t.launch_token is not None for t in candidates if t.outcome not in ("duplicate", "skipped"))
    # every ok trial measured every scenario at least min-replicates times
    for t in trials:
        if t.outcome == "ok":
            runs = store.runs(t.id)
            for name in spec.scenario_names:
                assert len([r for r in runs if r.scenario == name]) >= spec.replicates.min
                assert all(r.summary["completed"] > 0 for r in runs)
    # the boot log was parsed and the applied check ran on every booted trial
    assert trials[0].boot_facts is not None and (trials[0].boot_facts.kv_cache_tokens or 0) > 0
    result = analysis.analyze(store, spec)
    assert result.baseline is not None and result.baseline.objective is not None
    assert result.winner_reason
    verdict = store.verdict()
    assert verdict is not None and verdict.reason == result.winner_reason
    # each SLO judged on the real runs' request records, pooled over the config's boots
    checks = result.baseline.slo_checks
    assert {c.scenario for c in checks} == set(spec.scenario_names)
    assert all(c.basis == "requests" and c.n > 0 and c.state in ("met", "unproven", "violated") for c in checks)
    assert result.winner is None or result.winner.slo_state == "met"
    assert (example_study.out / "report.md").is_file() and (example_study.out / "report.html").is_file()
    assert baseline.key() == trials[0].config.key()
    status = servetune("status", str(example_study.out))
    assert status.returncode == 0 and "trials done" in status.stdout


def test_report_of_a_real_study_has_every_section_with_numbers(example_study: ExampleStudy, tmp_path: Path) -> None:
    again = servetune("report", str(example_study.out), "--out", str(tmp_path))
    assert again.returncode == 0, again.stdout + again.stderr
    text = (tmp_path / "report.md").read_text()
    for section in SECTIONS:
        assert section in text, section
    assert "## Winning config" in text or "## Recommended config (the baseline: nothing beat it)" in text
    store = StudyStore.open_existing(example_study.out)
    baseline = store.trials(TrialRole.baseline)[0]
    kv_tokens = baseline.boot_facts.kv_cache_tokens
    assert f"{kv_tokens:,}" in text                      # BootFacts of the real boot
    throughput = store.runs(baseline.id)[0].summary["output_throughput"]
    assert throughput > 0
    assert list((tmp_path / "plots").glob("*.png"))      # plots from the per-request records

    # The study's two profiles: one deployment each, the config its own analysis recommends, and
    # the Pareto front of their objectives (real runs, no boot of their own)
    spec = load_study(example_study.study_file)
    assert list(spec.profiles) == ["throughput", "latency"]
    for name, profile in analyze_profiles(store, spec).items():
        chosen = profile.winner or profile.baseline
        assert chosen is not None
        folder = tmp_path / "profiles" / name / ("winner" if profile.winner else "baseline")
        serve = (folder / "serve.sh").read_text()
        assert shlex.join(render_flags(chosen.config.flags)) in serve, (name, serve)
        assert f"### Profile {name}: {profile.objective_direction} {profile.objective_metric}" in text
        assert (example_study.out / "profiles" / name / folder.name / "serve.sh").is_file()  # tune's own report
    assert "## Pareto front" in text and "`output_throughput` against `mean_ttft_ms`" in text
    assert (tmp_path / "plots" / "pareto_front.png").stat().st_size > 10_000

    dom, stderr = chromium_check(tmp_path / "report.html", tmp_path / "report.png", tmp_path)
    assert "Headline" in dom and "<img" in dom
    assert "Uncaught" not in stderr and "ERROR:CONSOLE" not in stderr
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_emitted_serve_command_starts_a_server_that_applies_the_recommendation(example_study: ExampleStudy,
                                                                              tmp_path: Path) -> None:
    folder, config = _recommended(example_study)
    line = next(x for x in (folder / "serve.sh").read_text().splitlines() if "vllm serve" in x)
    argv = shlex.split(line)
    argv = argv[argv.index("vllm"):]  # the script runs it with `exec`
    assert argv[:2] == ["vllm", "serve"]
    model, flags = argv[2], argv[3:]
    assert flags == render_flags(config.flags)  # exactly what the study launched, minus host/port

    # Start it for real: the CPU build has no `vllm` console script, so its module entry point,
    # with the emitted model and flags verbatim.
    engine = VllmEngine(["python", "-m", "vllm.entrypoints.openai.api_server"], model=model,
                        startup_timeout_s=900, log_dir=tmp_path)
    started = engine.start(Config(flags=config.flags, env=config.env), tmp_path / "emitted.log")
    try:
        assert started.ok, started.detail
        store = StudyStore.open_existing(example_study.out)
        trial = next(t for t in store.trials() if t.config.key() == config.key() and t.outcome == "ok")
        applied = sorted(json.dumps(m.model_dump(mode="json")["flag"]) for m in started.mismatches)
        assert applied == sorted(json.dumps(m.model_dump(mode="json")["flag"]) for m in trial.mismatches)
        assert started.boot_facts.non_default_args == {
            k: v for k, v in trial.boot_facts.non_default_args.items() if k not in ("port", "host")
        } | {k: v for k, v in started.boot_facts.non_default_args.items() if k in ("port", "host")}
    finally:
        if started.server is not None:
            engine.stop(started.server)
