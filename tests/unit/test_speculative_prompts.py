"""Speculative decoding that means something: a sweep of `speculative-config` on random-token
prompts is warned of (plan, and every tune start), and `init` proposes vLLM's MTP method and an
n sweep for a model whose config.json declares MTP layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import servetune

from servetune.models.presets import make_model
from servetune.study import load_study, parse_study
from servetune.study.representative import speculative_warnings

ROOT = Path(__file__).resolve().parents[2]
SPEC_STUDY = ROOT / "tests" / "e2e" / "studies" / "specdecode.yaml"
NO_ENGINE = "servetune-test-no-such-engine"


def test_a_sweep_on_random_prompts_is_warned_of_naming_the_scenarios() -> None:
    ((loc, why),) = speculative_warnings(parse_study(SPEC_STUDY.read_text()))
    assert loc == ("space", "speculative-config.num_speculative_tokens")
    assert "random-token prompts (scenario(s) short, long)" in why and "dataset:" in why


def test_scenarios_of_the_users_own_prompts_are_not_warned_of(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("prompts.jsonl").write_text(json.dumps({"prompt": "def fib(n):", "output_len": 32}) + "\n")
    Path("lengths.jsonl").write_text(json.dumps({"input_len": 64, "output_len": 32}) + "\n")
    text = SPEC_STUDY.read_text().split("scenarios:")[0] + "scenarios:\n  - {name: mine, dataset: prompts.jsonl, " \
        "num_prompts: 4, temperature: 0}\n" + "objective: {maximize: output_throughput}\n"
    assert speculative_warnings(parse_study(text)) == []
    lengths_only = text.replace("prompts.jsonl", "lengths.jsonl")  # lengths: still random tokens
    assert "scenario(s) mine" in speculative_warnings(parse_study(lengths_only))[0][1]
    assert speculative_warnings(parse_study(text.replace("speculative-config.num_speculative_tokens",
                                                         "max-num-seqs"))) == []  # nothing speculative swept


def test_plan_and_the_tune_start_print_the_warning(tmp_path: Path) -> None:
    study = tmp_path / "spec.yaml"
    study.write_text(SPEC_STUDY.read_text().replace("command: [python, -m, vllm.entrypoints.openai.api_server]",
                                                    f"command: [{NO_ENGINE}]"))
    line = f"warning: {study}:17: space.speculative-config.num_speculative_tokens: speculative decoding is swept"
    squeezed = "".join(line.split())  # rich wraps long lines at the console's width, even inside the path
    planned = servetune("plan", study)
    assert squeezed in "".join(planned.stdout.split()), planned
    started = servetune("tune", study, "--out", tmp_path / "out")
    assert started.code == 2  # the missing engine stops it, after the warning
    assert squeezed in "".join(started.stdout.split()), started


def _mtp_model(tmp_path: Path) -> Path:
    model = tmp_path / "mtp-model"
    make_model("tiny", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    return model


def test_init_proposes_mtp_and_an_n_sweep_for_a_model_with_mtp_layers(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    result = servetune("init", study, "--model", _mtp_model(tmp_path), "--gpus", "1", "--compute-capability", "9.0")
    assert result.code == 0, result
    assert "warning: space.speculative-config: speculative decoding is swept" in " ".join(result.stdout.split())
    spec = load_study(study)
    assert spec.space["speculative-config"].values == tuple(
        {"method": "mtp", "num_speculative_tokens": n} for n in (1, 3, 6))
    text = study.read_text()
    assert "declares 1 MTP layer(s)" in text and "your own prompts" in text


def test_init_sweeps_n_around_a_serve_lines_mtp(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    serve = (f"vllm serve {_mtp_model(tmp_path)} --speculative-config "
             "'{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'")
    assert servetune("init", study, "--serve-cmd", serve, "--gpus", "1", "--compute-capability", "9.0").code == 0
    assert load_study(study).space["speculative-config.num_speculative_tokens"].values == (1, 6)


def test_init_proposes_nothing_speculative_without_mtp_layers(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    make_model("tiny", model)
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", model, "--gpus", "1", "--compute-capability", "9.0").code == 0
    assert not [k for k in load_study(study).space if k.startswith("speculative-config")]


def test_the_report_keeps_the_warning(tmp_path: Path) -> None:
    from report_study import build_study

    from servetune.report import write_report

    store, analysis = build_study(tmp_path)
    assert "random-token prompts" not in Path(write_report(analysis, store, tmp_path / "r0")["markdown"]).read_text()
    spec = parse_study(SPEC_STUDY.read_text())
    store.set_spec_doc(spec.model_dump(mode="json"))
    text = Path(write_report(analysis, store, tmp_path / "r1")["markdown"]).read_text()
    assert ("speculative decoding is swept on random-token prompts (scenario(s) short, long): the acceptance and "
            "the speed-ups of speculative decoding below say nothing about your own traffic") in text
