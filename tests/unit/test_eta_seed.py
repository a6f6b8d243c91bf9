"""The first ETA, seeded before the first boot from the model's size and the scenarios' token
counts, and its error reported once the study is done (status and report)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servetune.analysis import analysis, eta
from servetune.cli import app
from servetune.engine.bootfacts import BootFacts
from servetune.load.scenario import Scenario
from servetune.models.architecture import active_fraction
from servetune.models.presets import PRESETS, make_model
from servetune.models.source import model_config, model_gib
from servetune.store import StudyStore
from tests.fakes.counting_engine import CountingEngine, spec, tune
from tests.fakes.hf_cache import cache_config

# The H200 study's scenarios (docs/results/h200.md) and the median wall time of their runs there.
H200_RUNS = [
    (Scenario(name="single-decode", input_len=512, output_len=512, concurrency=1, num_prompts=3, warmups=1), 10.87),
    (Scenario(name="prefill-heavy", input_len=8192, output_len=256, concurrency=4, num_prompts=8, warmups=4), 7.86),
    (Scenario(name="contention", input_len=2048, output_len=512, concurrency=16, num_prompts=16, warmups=16), 8.67),
    (Scenario(name="chat", input_len=2048, output_len=256, concurrency=2, num_prompts=6, warmups=2), 6.11),
]


def test_seed_from_a_model_make_preset_matches_the_h200_study(tmp_path: Path) -> None:
    model = make_model("qwen3-8b", tmp_path / "qwen3-8b")  # config.json only, as for --load-format dummy
    gib, source = model_gib(model)
    assert source == "config.json" and gib == pytest.approx(15.27, rel=0.01)  # the boot log's 15.27 GiB
    seeded, basis = eta.seed(model, [s for s, _ in H200_RUNS])
    assert basis == "model 15.26 GiB (config.json)"
    assert 44 <= seeded.boot_s <= 73  # the H200's launch-to-healthy range over 9 boots
    for scenario, measured in H200_RUNS:
        assert seeded.run_s[scenario.name] == pytest.approx(measured, rel=0.3), scenario.name


# The MoE studies' scenarios on the H200 (Qwen3-30B-A3B, docs/results/h200.md) and the median
# wall time of their runs in the Optuna study's store (the OFAT's agree within 0.4 s).
H200_MOE_RUNS = [(scenario, measured) for (scenario, _), measured in zip(H200_RUNS, (9.1, 8.2, 15.5, 6.3), strict=True)]


def test_a_mixture_of_experts_decodes_at_the_weights_its_batch_routes_to(tmp_path: Path) -> None:
    """Qwen3-30B-A3B loads 56.9 GiB but a token reads 8 of 128 experts: counted whole, the seed
    put single-decode at 28 s a run (3x the measured 9.1 s) and the first ETA 38 % long. A batch
    of b tokens routes to E(1 - (1 - k/E)^b) distinct experts, so contention (16 at once) reads
    about two thirds of them."""
    model = make_model("qwen3-30b-a3b", tmp_path / "moe")
    config = model_config(model)
    assert config is not None
    assert active_fraction(config) == pytest.approx(3.3 / 30.5, rel=0.05)  # "30B-A3B"
    assert active_fraction(config, 16) == pytest.approx(0.66, abs=0.02)
    assert active_fraction(config, 10**6) == pytest.approx(1.0)  # every expert, at most
    dense = model_config(make_model("qwen3-8b", tmp_path / "dense"))
    assert dense is not None and active_fraction(dense, 16) == 1.0
    seeded, basis = eta.seed(model, [s for s, _ in H200_MOE_RUNS])
    assert basis == "model 56.87 GiB (config.json), 10.9% active per token"
    for scenario, measured in H200_MOE_RUNS:
        assert seeded.run_s[scenario.name] == pytest.approx(measured, rel=0.3), scenario.name


def test_weight_files_give_the_size_when_present(tmp_path: Path) -> None:
    (tmp_path / "model-00001.safetensors").write_bytes(b"\0" * 2**20)
    assert model_gib(tmp_path) == (1 / 1024, "weight files")


def test_the_first_estimate_and_its_error_are_in_status_and_the_store(tmp_path: Path) -> None:
    model = make_model("tiny", tmp_path / "tiny")
    _engine, store = tune(tmp_path, spec(tmp_path, {}, {"max-num-seqs": [4]}, model=model),
                         lambda url: CountingEngine(url, lambda c: BootFacts()))
    first = store.get_meta_json(eta.FIRST_ETA_META)
    study = spec(tmp_path, {}, {"max-num-seqs": [4]}, model=model)
    seeded, basis = eta.seed(model, list(study.scenarios))
    assert first["basis"] == basis == "model 0.00 GiB (config.json)"
    # before the first boot: the trials the study plans, each a boot and one run of "s" as seeded
    planned = analysis.planned_trial_count(StudyStore.in_dir(tmp_path / "fresh"), study)
    assert first["predicted_s"] == pytest.approx(planned * (seeded.boot_s + seeded.run_s["s"]))
    assert first["took_s"] == pytest.approx(store.elapsed_wall_s(), abs=5)
    store.close()
    shown = CliRunner().invoke(app, ["status", str(tmp_path / "study")])
    assert shown.exit_code == 0, shown.output
    assert "first estimate " in shown.output and " took " in shown.output


def test_a_hub_id_is_seeded_from_its_config_json_in_the_hugging_face_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A study naming a Hub id is seeded as plan seeds it: size and active experts from the cached
    config.json, not an unknown size with every expert read."""
    monkeypatch.chdir(tmp_path)
    cache_config(monkeypatch, tmp_path / "hub", "Qwen/Qwen3-30B-A3B", PRESETS["qwen3-30b-a3b"])
    _engine, store = tune(tmp_path, spec(tmp_path, {}, {"max-num-seqs": [4]}, model=Path("Qwen/Qwen3-30B-A3B")),
                         lambda url: CountingEngine(url, lambda c: BootFacts()))
    assert store.get_meta_json(eta.FIRST_ETA_META)["basis"] == "model 56.87 GiB (config.json), 10.9% active per token"
    store.close()


def test_summary_says_how_far_off_the_first_estimate_was(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    eta.record_first_estimate(store, 1500.0, "model 15.26 GiB (config.json)", at=0.0)
    assert eta.first_estimate_summary(store).endswith(" so far")
    store.set_meta_json(eta.FIRST_ETA_META, {**store.get_meta_json(eta.FIRST_ETA_META), "took_s": 1860.0})
    assert eta.first_estimate_summary(store) == \
        "first estimate 25 min (model 15.26 GiB (config.json)), took 31 min (+24 %)"


def test_the_planned_search_counts_every_value_the_baseline_does_not_run() -> None:
    """The first estimate is planned trials x seeded trial time: the example's OFAT walk proposes
    max-num-seqs 4 and 32 (the baseline runs 1), three batch budgets and both prefix-caching values."""
    from servetune.study import load_study

    example = load_study(Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml")
    assert analysis.search_size(example) == 2 + 3 + 2
    grid = example.model_copy(update={"strategy": "grid"})
    assert analysis.search_size(grid) == 2 * 3 * 2  # the baseline (max-num-seqs 1) is not a grid point
    in_grid = grid.model_copy(update={"engine": grid.engine.model_copy(
        update={"args": {**grid.engine.args, "max-num-seqs": 4, "max-num-batched-tokens": 256,
                         "enable-prefix-caching": True}})})
    assert analysis.search_size(in_grid) == 2 * 3 * 2 - 1


def test_a_search_plans_no_check_after_its_last_candidate(tmp_path: Path) -> None:
    """The H200 grid (8 candidates, a re-measurement every 4, budget 8) ran 10 trials: the check
    after the 8th candidate never comes, whether the budget ends the search or the space runs dry
    first (the runner asks the strategy before it boots a check)."""
    from servetune.study import load_study

    grid = load_study(Path(__file__).resolve().parents[2] / "examples" / "h200" / "qwen3-8b-grid.yaml")
    assert analysis.search_size(grid) == 8 and grid.budget.trials == 8 and grid.baseline_every == 4
    store = StudyStore.in_dir(tmp_path)
    assert analysis.planned_trial_count(store, grid) == 1 + 8 + 1
    roomy = grid.model_copy(update={"budget": grid.budget.model_copy(update={"trials": 12})})
    assert analysis.planned_trial_count(store, roomy) == 1 + 8 + 1
    store.close()


def test_short_screening_shortens_the_search_trials_of_the_estimate_and_not_the_finalists() -> None:
    """The example study screening at half its prompts: each search trial's runs take the fixed
    overhead and half of the rest; a finalist and its fresh baseline are estimated in full, and
    once runs are measured, each kind of trial from its own."""
    from types import SimpleNamespace

    from servetune.store.model import TrialRole
    from servetune.study import load_study

    example = load_study(Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml")
    short = example.model_copy(update={"screening": example.screening.model_copy(update={"num_prompts_fraction": 0.5})})
    seeded = eta.Eta(boot_s=40.0, run_s={"single-decode": 9.0, "burst": 5.0}, measured=False)
    full = eta.next_trial_s(example, seeded)
    assert full == eta.next_trial_s(short, seeded, validation=True) == 40.0 + 3 * (9.0 + 5.0)
    assert eta.next_trial_s(short, seeded) == 40.0 + 3 * ((1 + 0.5 * 8.0) + (1 + 0.5 * 4.0))
    assert eta.trials_s(example, seeded, 10, 4, slots=1) == 10 * full
    assert eta.trials_s(short, seeded, 10, 4, slots=2) == (6 * eta.next_trial_s(short, seeded) + 4 * full) / 2

    def trial(id: int, role: TrialRole) -> SimpleNamespace:   # what the estimate reads of a stored trial
        return SimpleNamespace(id=id, role=role, boot_s=30.0, done=True)

    def run(trial_id: int, scenario: str, wall_s: float) -> SimpleNamespace:
        return SimpleNamespace(trial_id=trial_id, scenario=scenario, wall_s=wall_s)

    trials = [trial(1, TrialRole.baseline), trial(2, TrialRole.candidate), trial(3, TrialRole.finalist)]
    runs = [run(1, "burst", 2.0), run(2, "burst", 2.2), run(3, "burst", 4.0),
            run(1, "single-decode", 3.0), run(3, "single-decode", 6.0)]
    measured = eta.for_study(short, trials, runs, seeded)
    assert measured.screen_run_s == {"burst": 2.1, "single-decode": 3.0}
    assert measured.run_s == {"burst": 4.0, "single-decode": 6.0}
    assert eta.next_trial_s(short, measured) == pytest.approx(30.0 + 3 * (2.1 + 3.0))
    assert eta.next_trial_s(short, measured, validation=True) == pytest.approx(30.0 + 3 * (4.0 + 6.0))
    # a study that does not screen pools every run, as before
    assert eta.for_study(example, trials, runs, seeded).run_s == {"burst": 2.2, "single-decode": 4.5}
