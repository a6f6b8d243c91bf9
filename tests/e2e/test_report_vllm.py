"""Reports from a real study's store: every section with real numbers, the HTML in Chromium,
and the emitted `vllm serve` command started for real with the applied check matching."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from servetune.engine import VllmEngine
from servetune.engine.config import Config, render_flags
from servetune.store import StudyStore
from servetune.study import load_study
from servetune.tune import analysis
from tests.conftest import ExampleStudy, servetune
from tests.unit.report_study import chromium_check

# The example study is shared with test_tune_vllm.py: one group, one worker, one study.
pytestmark = [pytest.mark.vllm, pytest.mark.concurrent, pytest.mark.xdist_group("example_study")]
SECTIONS = ("## Headline", "config", "## Trials", "## Per-parameter effects", "## Plots",
            "## Server-side evidence", "## Study cost")


def _recommended(study: ExampleStudy) -> tuple[Path, Config]:
    result = analysis.analyze(StudyStore.open_existing(study.out), load_study(study.study_file))
    chosen = result.winner or result.baseline
    assert chosen is not None
    return study.out / ("winner" if result.winner else "baseline"), chosen.config


def test_report_of_a_real_study_has_every_section_with_numbers(example_study: ExampleStudy, tmp_path: Path) -> None:
    again = servetune("report", str(example_study.out), "--out", str(tmp_path))
    assert again.returncode == 0, again.stdout + again.stderr
    text = (tmp_path / "report.md").read_text()
    for section in SECTIONS:
        assert section in text, section
    assert "## Winning config" in text or "## Recommended config (the baseline: nothing beat it)" in text
    store = StudyStore.open_existing(example_study.out)
    baseline = store.trials("baseline")[0]
    kv_tokens = baseline.boot_facts.kv_cache_tokens
    assert f"{kv_tokens:,}" in text                      # BootFacts of the real boot
    throughput = store.runs(baseline.id)[0].summary["output_throughput"]
    assert throughput > 0
    assert list((tmp_path / "plots").glob("*.png"))      # plots from the per-request records

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
        assert applied == sorted(json.dumps(m["flag"]) for m in trial.mismatches)
        assert started.boot_facts.non_default_args == {
            k: v for k, v in trial.boot_facts.non_default_args.items() if k not in ("port", "host")
        } | {k: v for k, v in started.boot_facts.non_default_args.items() if k in ("port", "host")}
    finally:
        if started.server is not None:
            engine.stop(started.server)
