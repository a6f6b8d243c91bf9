"""The decode roofline in a report: the floor's arithmetic (the H200's hand-measured numbers), what
it counts (active experts, KV reads), which scenarios are decode-bound, and the section in both
templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_study import build_study

from servetune.analysis.types import ConfigResult, Estimate, ScenarioResult, StudyAnalysis
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.load.scenario import PRESETS as SCENARIO_PRESETS
from servetune.load.scenario import Scenario
from servetune.models.architecture import active_fraction
from servetune.models.presets import PRESETS
from servetune.report.context import build
from servetune.report.html import render_html
from servetune.report.markdown import render_markdown
from servetune.report.roofline import (
    GIB,
    build_roofline,
    decode_bound,
    floor_tpot_ms,
    kv_bytes_per_token,
    roofline_fraction,
)
from servetune.store import StudyStore, TrialRole, meta
from servetune.study.spec import StudySpec
from servetune.vocabulary import Outcome
from tests.fakes.hf_cache import cache_config

# docs/results/h200.md: HBM read 4,314 GB/s; 15.27 GiB of Qwen3-8B weights; single-decode TPOT 5.11 ms.
H200_GBPS, Q8B_GIB, Q8B_TPOT_MS = 4314.0, 15.27, 5.11


def test_the_h200_floor_and_fraction_match_the_hand_measurement() -> None:
    floor = floor_tpot_ms(Q8B_GIB * GIB, H200_GBPS)
    assert round(floor, 2) == 3.80
    assert round(100 * roofline_fraction(floor, Q8B_TPOT_MS)) == 74


def test_kv_reads_raise_the_floor_by_their_bytes() -> None:
    weights_only = floor_tpot_ms(Q8B_GIB * GIB, H200_GBPS)
    with_kv = floor_tpot_ms(Q8B_GIB * GIB, H200_GBPS, kv_bytes=4314e6)  # 4.314 GB: one more millisecond
    assert with_kv - weights_only == pytest.approx(1.0)


def test_a_dense_model_reads_all_its_weights_and_qwen3_8b_keeps_144_kib_of_kv_per_token() -> None:
    assert active_fraction(PRESETS["qwen3-8b"]) == 1.0
    assert kv_bytes_per_token(PRESETS["qwen3-8b"]) == 36 * 2 * 8 * 128 * 2 == 144 * 1024


def test_qwen3_30b_a3b_reads_its_active_share_about_3_3_of_30_5_billion_parameters() -> None:
    # The model card: 30.5 B parameters, 3.3 B activated.
    assert active_fraction(PRESETS["qwen3-30b-a3b"]) == pytest.approx(3.3 / 30.5, rel=0.05)


def test_decode_bound_means_answers_of_at_least_half_the_prompt_and_no_prefill_sweep() -> None:
    assert decode_bound(SCENARIO_PRESETS["single-decode"])           # 512 -> 512
    assert decode_bound(Scenario(input_len=128, output_len=96))      # the main job's burst
    assert not decode_bound(SCENARIO_PRESETS["prefill-heavy"])       # 8192 -> 256
    assert not decode_bound(Scenario(input_len=128, output_len=16, sweep_input_lens=[128, 256]))


def _h200_study(tmp_path: Path, model_name: str | None = None,
                candidate: Config | None = None) -> tuple[StudyStore, StudyAnalysis, dict]:
    """Qwen3-8B on the H200: a baseline at the hand-measured TPOT and a candidate 10 % faster
    (`model_name`: the study names that model instead of the directory written here)."""
    model = tmp_path / "qwen3-8b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(PRESETS["qwen3-8b"]))
    spec = StudySpec.model_validate({
        "name": "h200", "engine": {"model": model_name or str(model)}, "space": {"max-num-seqs": [8, 64]},
        "scenarios": [{"preset": "single-decode"}, {"preset": "prefill-heavy"}]}).model_dump(mode="json")
    store = StudyStore.in_dir(tmp_path / "study")
    base_cfg = Config.of({})
    fast_cfg = candidate or Config.of({"max-num-seqs": 64})
    ids = []
    for role, cfg in (("baseline", base_cfg), ("candidate", fast_cfg)):
        trial = store.begin_trial(TrialRole(role), cfg, {})
        store.record_boot(trial.id, healthy_at=None, boot_facts=BootFacts(model_load_gib=Q8B_GIB), mismatches=[],
                          log_path=None)
        store.finish_trial(trial.id, Outcome.ok)
        ids.append(trial.id)

    def result(cfg: Config, tid: int, tpot: float, is_baseline: bool) -> ConfigResult:
        scen = {s: ScenarioResult(s, 3, {"mean_tpot_ms": Estimate(tpot, tpot * 0.98, tpot * 1.02, 3)})
                for s in ("single-decode", "prefill-heavy")}
        return ConfigResult(key=cfg.key(), config=cfg, params={}, label="baseline" if is_baseline else cfg.label(base_cfg),
                            trial_ids=[tid], outcome="ok", scenarios=scen, is_baseline=is_baseline)

    base = result(base_cfg, ids[0], Q8B_TPOT_MS, True)
    analysis = StudyAnalysis(study_name="h200", objective_metric="output_throughput", objective_direction="maximize",
                             baseline=base, configs=[base, result(fast_cfg, ids[1], Q8B_TPOT_MS / 1.1, False)],
                             winner=None, winner_reason="")
    return store, analysis, spec


def test_each_config_gets_its_share_of_the_roofline_in_decode_bound_scenarios_only(tmp_path: Path) -> None:
    store, analysis, spec = _h200_study(tmp_path)
    view = build_roofline(analysis, {t.id: t for t in store.trials()}, spec,
                          {"read_gbps": H200_GBPS, "device": "NVIDIA H200"})
    assert view is not None and view.read_gbps == H200_GBPS
    assert [(r.label, r.scenario) for r in view.rows] == [("baseline", "single-decode"),
                                                          ("max-num-seqs=64", "single-decode")]
    base, fast = view.rows
    # KV of one sequence at its mean context (512 + 256 tokens) on top of the weights.
    kv = 768 * 144 * 1024
    assert base.kv_gib == pytest.approx(kv / GIB)
    assert base.floor_ms == pytest.approx(floor_tpot_ms(Q8B_GIB * GIB, H200_GBPS, kv))
    assert round(100 * base.fraction) == 75  # 74 % on weights alone, the KV reads add 0.1 ms
    assert fast.fraction == pytest.approx(base.fraction * 1.1)
    low, high = base.fraction_interval
    assert low < base.fraction < high


def test_a_share_above_the_roofline_is_called_impossible(tmp_path: Path) -> None:
    """A mixture of experts whose config.json is gone is counted with every expert: its floor is
    then above what the config measures, and the report must not pass that off as a share."""
    store, analysis, spec = _h200_study(tmp_path)
    trials = {t.id: t for t in store.trials()}
    view = build_roofline(analysis, trials, spec, {"read_gbps": H200_GBPS, "device": "NVIDIA H200"})
    assert not any("above 100 %" in n for n in view.notes)          # 75 % and 83 %: nothing to flag
    (Path(spec["engine"]["model"]) / "config.json").unlink()
    view = build_roofline(analysis, trials, spec, {"read_gbps": H200_GBPS / 2, "device": "NVIDIA H200"})
    weights_only = floor_tpot_ms(Q8B_GIB * GIB, H200_GBPS / 2) / Q8B_TPOT_MS    # ~1.49: all weights, no KV
    assert [r.fraction for r in view.rows] == pytest.approx([weights_only, weights_only * 1.1])
    assert view.notes[0] == ("the model's config.json was not readable (neither a directory nor the Hugging Face "
                             "cache holds it): all weights counted, no KV reads")
    assert view.notes[1].startswith("2 row(s) above 100 % of the roofline (baseline, max-num-seqs=64)")
    assert "without config.json a mixture of experts is counted with all its experts" in view.notes[1]


def test_a_hub_id_s_config_json_comes_from_the_hugging_face_cache(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A study naming `Qwen/Qwen3-30B-A3B` (no directory): its config.json in the Hugging Face
    cache counts the active experts and the KV reads, as for a local directory."""
    cache_config(monkeypatch, tmp_path / "hub", "Qwen/Qwen3-30B-A3B", PRESETS["qwen3-30b-a3b"])
    store, analysis, spec = _h200_study(tmp_path, model_name="Qwen/Qwen3-30B-A3B")
    view = build_roofline(analysis, {t.id: t for t in store.trials()}, spec,
                          {"read_gbps": H200_GBPS, "device": "NVIDIA H200"})
    assert view is not None and not view.notes
    share = active_fraction(PRESETS["qwen3-30b-a3b"])
    assert view.counted == f"weights as loaded x {share:.3f} (active experts) + KV reads of the batch at its mean context"
    base = view.rows[0]
    assert base.weight_gib == pytest.approx(Q8B_GIB * share)
    assert base.kv_gib == pytest.approx(768 * kv_bytes_per_token(PRESETS["qwen3-30b-a3b"]) / GIB) and base.kv_gib > 0


def test_a_hybrid_reads_the_kv_of_its_attention_layers_only_and_fp8_halves_it(tmp_path: Path) -> None:
    """Qwen3.5-35B-A3B (the GB10 report's): 10 of its 40 layers hold KV; a config with
    --kv-cache-dtype fp8_e4m3 reads one byte an element where the baseline reads two."""
    store, analysis, spec = _h200_study(tmp_path, candidate=Config.of({"kv-cache-dtype": "fp8_e4m3"}))
    config = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" /
                         "qwen3.5-35b-a3b-fp8.json").read_text())
    (Path(spec["engine"]["model"]) / "config.json").write_text(json.dumps(config))
    view = build_roofline(analysis, {t.id: t for t in store.trials()}, spec,
                          {"read_gbps": H200_GBPS, "device": "NVIDIA H200"})
    assert view is not None
    assert "(10 of 40 layers hold KV" in view.counted
    base, fp8 = view.rows
    assert fp8.label == "kv-cache-dtype=fp8_e4m3"
    assert base.kv_gib == pytest.approx(768 * 2 * 10 * 2 * 256 * 2 / GIB)   # 512 + 256 tokens' mean context
    assert fp8.kv_gib == pytest.approx(base.kv_gib / 2)


def test_a_failed_measurement_is_said_and_no_measurement_hides_the_section(tmp_path: Path) -> None:
    store, analysis, spec = _h200_study(tmp_path)
    trials = {t.id: t for t in store.trials()}
    assert build_roofline(analysis, trials, spec, None) is None
    view = build_roofline(analysis, trials, spec, {"unavailable": "python could not measure (no numpy)"})
    assert view is not None and not view.rows
    assert view.notes == ["memory bandwidth not measured: python could not measure (no numpy)"]


def test_both_templates_show_the_section(tmp_path: Path) -> None:
    root = tmp_path / "report-study"
    root.mkdir()
    report_store, report_analysis = build_study(root)
    data = build(report_analysis, report_store)
    assert data.roofline is None  # measured nothing: no section
    store, analysis, spec = _h200_study(tmp_path)
    data.roofline = build_roofline(analysis, {t.id: t for t in store.trials()}, spec,
                                   {"read_gbps": H200_GBPS, "device": "NVIDIA H200"})
    md, html = render_markdown(data, {p.name: f"{p.name}.png" for p in data.plots}), render_html(data)
    assert "## Decode roofline" in md and 'id="roofline"' in html
    for text in (md, html):
        assert "4,314 GB/s" in text and "NVIDIA H200" in text
        assert "5.11 [5.008, 5.212]" in text and "75 %" in text


def test_the_report_reads_the_study_s_stored_measurement(tmp_path: Path) -> None:
    store, analysis = build_study(tmp_path)
    store.set_meta_json(meta.BANDWIDTH, {"read_gbps": 25.0, "device": "cpu x86_64"})
    view = build(analysis, store).roofline
    assert view is not None and view.read_gbps == 25.0
    assert "no decode-bound scenario (answers at least half the prompt's length)" in view.notes
