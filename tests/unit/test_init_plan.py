"""`servetune init` writes a study that loads and plans; `servetune plan` / `tune --dry-run` check the
engine, the model and the flags and list candidates, boots and ETA without a boot; a real study
stops on a misspelt flag before its first boot."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cli_run import assert_one_line_error, servetune
from rich.console import Console

from servetune.analysis import known, slo_proof
from servetune.engine.defaults import EngineDefaults
from servetune.engine.gates import why_not_here
from servetune.engine.hardware import Hardware, parse_nvidia_smi, visible
from servetune.engine.vllm import VllmEngine
from servetune.models.presets import make_model
from servetune.store import StudyStore
from servetune.study import load_study, parse_study
from servetune.study.serve_line import parse_serve_line
from servetune.study.spec import SpecError
from servetune.tune import plan
from servetune.tune.display import StudyDisplay
from servetune.tune.plan import flag_problems, planned_candidates
from servetune.tune.runner import StudyRunner
from tests.fakes.counting_engine import CountingEngine
from tests.fakes.standin import study_text

ROOT = Path(__file__).resolve().parents[2]
# The long flags vLLM 0.32's API server parser takes that these tests use (a real read lists ~400).
FLAGS = ["load-format", "kv-cache-memory-bytes", "max-model-len", "max-num-seqs", "max-num-batched-tokens",
         "enable-prefix-caching", "no-enable-prefix-caching", "tensor-parallel-size", "async-scheduling",
         "compilation-config", "gpu-memory-utilization", "kv-cache-dtype"]
KNOWN = EngineDefaults(known=True, source="test parser", values={"enable-prefix-caching": True}, flags=FLAGS)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    model = tmp_path / "tiny"
    make_model("tiny", model)
    return model


@pytest.fixture
def parser_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's defaults as a test parser gives them: no vLLM import (that is the slow test's)."""
    monkeypatch.setattr(VllmEngine, "read_defaults", lambda self: KNOWN)


# --- the serve line ---------------------------------------------------------------------------

def test_serve_line_becomes_the_engine_section() -> None:
    line = parse_serve_line("CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen3-8B -tp 2 --max-num-seqs 128 "
                            "--enable-prefix-caching --no-async-scheduling --gpu-memory-utilization=0.95 "
                            "--compilation-config '{\"cudagraph_mode\": \"PIECEWISE\"}' --max-model-len -1 "
                            "--api-key sk-secret-value --port 8001 --host 0.0.0.0 --served-model-name qwen")
    assert line.command == ["vllm", "serve"]
    assert line.model == "Qwen/Qwen3-8B"
    assert line.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert line.args == {"tensor-parallel-size": 2, "max-num-seqs": 128, "enable-prefix-caching": True,
                         "async-scheduling": False, "gpu-memory-utilization": 0.95,
                         "compilation-config": {"cudagraph_mode": "PIECEWISE"}, "max-model-len": -1}
    assert (line.port, line.served_model_name, line.secret_env) == (8001, "qwen", ["VLLM_API_KEY"])
    assert "sk-secret-value" not in repr(line)  # the key stays in the user's environment


def test_serve_line_with_python_module_and_model_flag() -> None:
    line = parse_serve_line("python3 -m vllm.entrypoints.openai.api_server --model ./m --max_num_seqs 8")
    assert (line.command, line.model, line.args) == (["python3", "-m", "vllm.entrypoints.openai.api_server"],
                                                     "./m", {"max-num-seqs": 8})


@pytest.mark.parametrize(("text", "needle"), [
    ("vllm serve", "no model"),
    ("docker run img", "no model in the command line"),   # a docker run line is read, and has no model
    ("sglang serve m", "expected `vllm serve MODEL"),
    ("vllm serve m 'unclosed", "cannot split"),
    ("vllm serve m extra", "unexpected argument"),
])
def test_serve_line_errors_name_the_flag(tmp_path: Path, text: str, needle: str) -> None:
    assert_one_line_error(servetune("init", tmp_path / "s.yaml", "--serve-cmd", text), "--serve-cmd", needle)
    assert not (tmp_path / "s.yaml").exists()


# --- hardware ---------------------------------------------------------------------------------

def test_nvidia_smi_rows_and_the_visible_devices() -> None:
    gpus = parse_nvidia_smi("NVIDIA H200, 143771, 9.0\nNVIDIA H200, 143771, 9.0\nNVIDIA A100-SXM4-80GB, 81920, 8.0\n")
    assert [round(g.memory_gib) for g in gpus] == [140, 140, 80]
    assert gpus[0].compute_capability == (9, 0)
    fp8_kv = ("kv-cache-dtype", "fp8")
    assert why_not_here(*fp8_kv, Hardware(gpus[:2], 16, "t")) is None
    assert "these GPUs are 8.0" in (why_not_here(*fp8_kv, Hardware(gpus, 16, "t")) or "")
    assert [g.name for g in visible(gpus, "2")] == ["NVIDIA A100-SXM4-80GB"]
    assert visible(gpus, "") == () and visible(gpus, None) == gpus
    assert visible(gpus, "GPU-1234") == gpus  # UUIDs are not resolved here: all of them
    assert parse_nvidia_smi("NVIDIA T4, 15360, [N/A]\n")[0].compute_capability is None


# --- init ---------------------------------------------------------------------------------------

def test_init_on_the_cpu_writes_a_study_that_loads(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    result = servetune("init", study, "--model", tiny, "--gpus", "0", "--workload", "chat",
                       "--slo", "ttft:p99=2000")
    assert result.code == 0, result
    spec = load_study(study)
    text = study.read_text()
    assert text.startswith("# Written by `servetune init`")
    assert spec.engine.model == str(tiny)
    # no weight files in a `model make` directory: random weights; the CPU build sizes its KV cache by bytes
    assert spec.engine.args["load-format"] == "dummy" and "kv-cache-memory-bytes" in spec.engine.args
    assert set(spec.space) == {"max-num-seqs", "max-num-batched-tokens", "enable-prefix-caching"}
    assert spec.objective.slo == {"p99_ttft_ms": 2000.0}
    assert spec.scenarios[0].input_len == 512  # chat's 2048 shortened for the CPU
    # every searched flag and the baseline say why, on their own line
    for key in (*spec.space, "args", "strategy", "replicates"):
        (line,) = [ln for ln in text.splitlines() if ln.lstrip().startswith(f"{key}:")]
        assert "  # " in line, line


def test_init_for_sglang_on_the_cpu_writes_its_space_and_no_vllm_sizing(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    result = servetune("init", study, "--model", tiny, "--gpus", "0", "--workload", "chat", "--engine", "sglang")
    assert result.code == 0, result
    spec = load_study(study)
    assert spec.engine.kind == "sglang" and "mem-fraction-static" in spec.space
    # vLLM's CPU build sizes its KV cache by bytes; SGLang's baseline sets none of it, nor says it does
    assert "kv-cache-memory-bytes" not in study.read_text()


def test_init_refuses_to_overwrite_without_force(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text("mine\n")
    assert_one_line_error(servetune("init", study, "--model", tiny, "--gpus", "0"), str(study), "--force")
    assert study.read_text() == "mine\n"
    assert servetune("init", study, "--model", tiny, "--gpus", "0", "--force").code == 0
    load_study(study)


def test_init_for_several_gpus_compares_tensor_parallel_per_gpu(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    serve = f"vllm serve {tiny} --max-num-seqs 64"
    assert servetune("init", study, "--serve-cmd", serve, "--gpus", "4", "--gpu-memory-gib", "141",
                     "--compute-capability", "9.0", "--workload", "contention").code == 0
    spec = load_study(study)
    assert spec.engine.command == ["vllm", "serve"]
    assert spec.engine.args["max-num-seqs"] == 64  # the serve line is the baseline
    assert spec.space["tensor-parallel-size"].values == (1, 2)
    assert spec.objective.per_gpu
    assert (spec.parallel.slots, spec.parallel.gpus_per_trial) == (2, 2)
    assert spec.space["kv-cache-dtype"].values == ("fp8",)
    assert {"async-scheduling", "compilation-config", "gpu-memory-utilization"} <= set(spec.space)
    # an A100 (8.0) has no native fp8 KV cache
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--compute-capability", "8.0",
                     "--force").code == 0
    assert "kv-cache-dtype" not in load_study(study).space


def test_init_derives_lengths_from_a_jsonl_of_requests(tmp_path: Path, tiny: Path) -> None:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps({"input_len": i, "output_len": o}) + "\n"
                               for i, o in [(100, 10), (200, 20), (300, 30), (400, 40)]))
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--workload", traffic).code == 0
    (scenario,) = load_study(study).scenarios
    assert scenario.name == "my-traffic"
    assert scenario.input_len.mean == 250 and scenario.output_len.mean == 25
    assert round(scenario.input_len.std, 1) == 129.1  # sample sd of 100..400
    assert "p90 370" in study.read_text()


def test_init_capacity_sizes_the_levels_for_its_percentile(tmp_path: Path, tiny: Path) -> None:
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--goal", "capacity",
                     "--slo", "ttft:p99=1000", "--workload", "chat-bursty").code == 0
    spec = load_study(study)  # the loader refuses a level too small to show a p99 met
    assert spec.objective.maximize == "capacity" and spec.capacity.num_prompts >= 368
    line = assert_one_line_error(servetune("init", tmp_path / "c.yaml", "--model", tiny, "--gpus", "1",
                                           "--goal", "capacity"), "--slo")
    assert "capacity" in line


def test_init_sizes_a_tuning_study_for_its_percentile_slo(tmp_path: Path, tiny: Path) -> None:
    # a p99 is shown met only on 368 requests pooled over a config's boots: a finalist's two boots
    # of two replicates need 92 a run (the chat preset sends 20 a run on a GPU)
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "1", "--slo", "ttft:p99=1000",
                     "--workload", "chat").code == 0
    spec = load_study(study)
    assert [s.num_prompts for s in spec.scenarios] == [92]
    assert slo_proof.unprovable(spec) == []
    assert "368 requests" in study.read_text()
    smaller = study.read_text().replace("num_prompts: 92", "num_prompts: 20")
    assert slo_proof.unprovable(parse_study(smaller)) != []   # what plan would warn of


def test_init_bad_workload_and_model_mismatch(tmp_path: Path, tiny: Path) -> None:
    assert_one_line_error(servetune("init", tmp_path / "s.yaml", "--model", tiny, "--workload", "chatt"),
                          "--workload chatt", "neither a preset")
    assert_one_line_error(servetune("init", tmp_path / "s.yaml", "--model", "a/b", "--serve-cmd", "vllm serve c/d"),
                          "--model 'a/b'", "differ")


# --- plan -----------------------------------------------------------------------------------

def test_plan_lists_candidates_and_marks_duplicates_of_the_defaults(tiny: Path) -> None:
    spec = parse_study(f"""
name: p
engine: {{model: {tiny}, args: {{max-num-seqs: 4}}}}
space:
  max-num-seqs: [4, 8, 16]
  enable-prefix-caching: [true, false]
scenarios: [{{preset: chat}}]
""")
    planned = planned_candidates(spec, KNOWN)
    assert [c.label for c in planned] == ["max-num-seqs=8", "max-num-seqs=16", "enable-prefix-caching=True",
                                          "enable-prefix-caching=False"]
    duplicate = planned[2].duplicate
    assert duplicate is not None and "same as the baseline" in duplicate and "default" in duplicate
    assert [c.duplicate is None for c in planned] == [True, True, False, True]
    # without the engine's defaults nothing is known to be the same
    assert all(c.duplicate is None for c in planned_candidates(spec, EngineDefaults()))


@pytest.mark.parametrize(("kind", "command", "refused"), [
    ("vllm", "[python, -m, vllm.entrypoints.openai.api_server]", True),
    ("vllm", "[python, tests/fakes/standin_engine.py]", False),  # not vLLM's own entry point
    ("sglang", "[python, -m, sglang.launch_server]", False),     # its defaults are read where installed
])
def test_plan_refuses_unread_defaults_only_where_the_engine_requires_them(tiny: Path, kind: str, command: str,
                                                                          refused: bool) -> None:
    spec = parse_study(f"""
name: p
engine: {{kind: {kind}, command: {command}, model: {tiny}}}
scenarios: [{{preset: chat}}]
""")
    unread = EngineDefaults(source="unknown: the parser could not be imported")
    problems = plan.assemble(spec, unread, plan.locate(str(tiny)), engine="python", found=True).problems
    assert any("the engine is not usable here" in why for _, why in problems) is refused


def test_plan_budget_counts_booted_candidates_only(tiny: Path) -> None:
    spec = parse_study(f"""
name: p
engine: {{model: {tiny}}}
space: {{enable-prefix-caching: [true, false], max-num-seqs: [8, 16]}}
scenarios: [{{preset: chat}}]
budget: {{trials: 2}}
""")
    planned = planned_candidates(spec, KNOWN)
    assert [c.label for c in planned] == ["enable-prefix-caching=True", "enable-prefix-caching=False",
                                          "max-num-seqs=8"]


def test_flag_problems_name_the_key_and_the_likely_flag(tiny: Path) -> None:
    spec = parse_study(f"""
name: p
engine: {{model: {tiny}, args: {{max-num-seq: 4}}}}
space: {{enable-prefix-cachin: [false], env.VLLM_X: ["1"], compilation-config.cudagraph_mode: [PIECEWISE]}}
scenarios: [{{preset: chat}}]
""".replace("args: {max-num-seq: 4}", "args: {max-num-seq: 4, compilation-config: {level: 3}}"))
    problems = dict(flag_problems(spec, KNOWN))
    assert set(problems) == {("engine", "args", "max-num-seq"), ("space", "enable-prefix-cachin")}
    assert "did you mean 'max-num-seqs'" in problems[("engine", "args", "max-num-seq")]
    assert flag_problems(spec, EngineDefaults()) == []  # an engine whose parser was not read: nothing to say


def test_plan_command_prints_plan_and_fails_on_a_bad_flag(tmp_path: Path, tiny: Path, parser_flags: None) -> None:
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "0").code == 0
    ok = servetune("plan", study)
    assert ok.code == 0, ok
    assert "max-num-seqs=8" in ok.stdout and "boots:" in ok.stdout and "ETA:" in ok.stdout and "ready" in ok.stdout
    assert "stopping rule: none" in ok.stdout
    study.write_text(study.read_text() + "stopping: {chance_below: 0.05}\n")
    ruled = servetune("plan", study)
    assert ruled.code == 0, ruled
    assert "stopping rule: stop once no unbooted config has a 5 % chance" in " ".join(ruled.stdout.split())
    dry = servetune("tune", study, "--out", tmp_path / "out", "--dry-run")
    assert dry.code == 0 and "boots:" in dry.stdout
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
    study.write_text(study.read_text().replace("max-num-seqs:", "max-num-seqz:"))
    line = assert_one_line_error(servetune("tune", study, "--out", tmp_path / "out", "--dry-run"),
                                 f"{study}:", "space.max-num-seqz", "did you mean 'max-num-seqs'")
    assert "no flag --max-num-seqz" in line


def test_plan_fails_on_a_missing_engine_and_model(tmp_path: Path, parser_flags: None) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(f"name: p\nengine: {{command: [servetune-test-no-such-engine], model: {tmp_path / 'nope'}}}\n"
                     "scenarios: [{preset: chat}]\n")
    result = servetune("plan", study)
    assert result.code == 2
    assert len(result.error_lines) == 2, result.stderr
    assert "engine.command" in result.error_lines[0] and "not on PATH" in result.error_lines[0]
    assert "engine.model" in result.error_lines[1] and "no directory" in result.error_lines[1]


def test_a_study_stops_on_a_misspelt_flag_before_any_boot(tmp_path: Path, tiny: Path) -> None:
    spec = parse_study(f"""
name: p
engine: {{model: {tiny}, args: {{max-num-seq: 4}}}}
scenarios: [{{name: s, input_len: 8, output_len: 4, num_prompts: 2, warmups: 0}}]
""")
    runner = StudyRunner(spec, tmp_path / "out", display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    runner.store.set_meta_json(known.DEFAULTS_META, KNOWN.model_dump(mode="json"))
    engine = CountingEngine("http://127.0.0.1:9", facts_for=lambda config: None)
    runner.engine = runner.executor.engine = engine
    with pytest.raises(SpecError, match="max-num-seq"):
        runner.run()
    assert engine.started == []


@pytest.mark.parametrize("broken", ["engine", "model"])
def test_a_study_stops_on_a_missing_engine_or_model_before_anything(tmp_path: Path, tiny: Path,
                                                                   broken: str) -> None:
    """`tune` checks what `plan` checks: one located line, exit 2, no boot and nothing recorded
    (before, each trial failed to boot and the study ended without a verdict)."""
    study = tmp_path / "study.yaml"
    command = "[servetune-test-no-such-engine]" if broken == "engine" else "[python, -c, 'raise SystemExit(3)']"
    model = tmp_path / "nope" if broken == "model" else tiny
    study.write_text(f"name: p\nengine:\n  command: {command}\n  model: {model}\n"
                     "scenarios: [{name: s, input_len: 8, output_len: 4, num_prompts: 2, warmups: 0}]\n")
    result = servetune("tune", study, "--out", tmp_path / "out")
    if broken == "engine":
        assert_one_line_error(result, f"{study}:3: engine.command: 'servetune-test-no-such-engine' is not on PATH")
    else:
        assert_one_line_error(result, f"{study}:4: engine.model: '{model}' is not reachable: no directory {model}")
    _assert_nothing_recorded(tmp_path / "out")


def test_a_mistyped_local_model_path_of_hub_form_stops_the_start(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`models/tyni` has a Hub id's form, but `models/` is a directory here: a local path with a
    typo, located, exit 2, nothing recorded. A Hub id whose first part is no directory here
    still passes the start's offline check (the engine downloads it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    make_model("tiny", tmp_path / "models" / "tiny")
    study = tmp_path / "study.yaml"
    study.write_text("name: p\nengine:\n  command: [python, -c, 'raise SystemExit(3)']\n  model: models/tyni\n"
                     "scenarios: [{name: s, input_len: 8, output_len: 4, num_prompts: 2, warmups: 0}]\n")
    result = servetune("tune", study, "--out", tmp_path / "out")
    assert_one_line_error(result, f"{study}:4: engine.model: 'models/tyni' is not reachable: no such directory "
                                  "models/tyni (models/ exists here)")
    _assert_nothing_recorded(tmp_path / "out")
    plan.check_start(parse_study("name: p\nengine: {model: Qwen/Qwen3-8B}\nscenarios: [{preset: chat}]\n"))
    plan.check_start(parse_study("name: p\nengine: {model: models/tiny}\nscenarios: [{preset: chat}]\n"))


def _assert_nothing_recorded(out: Path) -> None:
    """No trial, no session, no server log; not even the spec: the corrected file starts this directory."""
    store = StudyStore.open_existing(out, read_only=True)
    assert (store.trials(), store.sessions(), store.spec_doc()) == ([], [], None)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(StudyStore.FILENAME)) == ["tune.lock"]


def test_a_resumed_study_checks_its_model_again(tmp_path: Path, tiny: Path) -> None:
    spec = parse_study(f"""
name: p
engine: {{command: [python, -c, 'raise SystemExit(3)'], model: {tiny}}}
scenarios: [{{name: s, input_len: 8, output_len: 4, num_prompts: 2, warmups: 0}}]
""")
    display = StudyDisplay(Console(file=io.StringIO()), enabled=False)
    first = StudyRunner(spec, tmp_path / "out", display=display)
    first.session.lock.release()
    first.store.close()
    tiny.rename(tmp_path / "moved")
    with pytest.raises(SpecError, match=r"engine\.model: .* is not reachable: no directory"):
        StudyRunner(spec, tmp_path / "out", display=display)
    store = StudyStore.open_existing(tmp_path / "out", read_only=True)
    assert (store.trials(), store.sessions()) == ([], [])
    assert not (tmp_path / "out" / "logs").exists()  # no server started


def test_the_start_asks_no_one_for_a_model_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub id in no local cache passes the start's check without a network call (the engine
    downloads it at its first boot); with HF_HUB_OFFLINE=1 the engine could not, so it fails."""
    spec = parse_study("name: p\nengine: {model: servetune-test/no-such-model}\nscenarios: [{preset: chat}]\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the study's start asked the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    plan.check_start(spec)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SpecError, match="engine.model: 'servetune-test/no-such-model' is not reachable"):
        plan.check_start(spec)


def test_a_misspelt_flag_at_the_start_is_located_in_the_study_file(tmp_path: Path, tiny: Path,
                                                                    parser_flags: None) -> None:
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", tiny, "--gpus", "0").code == 0
    study.write_text(study.read_text().replace("max-num-seqs:", "max-num-seqz:"))
    result = servetune("tune", study, "--out", tmp_path / "out")
    assert result.code == 2 and "Traceback" not in result.stderr, result
    line = result.error_lines[-1]  # after the study's progress line: the flags are read once it started
    assert re.match(rf"error: {re.escape(str(study))}:\d+: space\.max-num-seqz: the installed engine has no flag "
                    r"--max-num-seqz \(did you mean 'max-num-seqs'\?\)", line), line
    trials = StudyStore.open_existing(tmp_path / "out", read_only=True).trials()
    assert trials == []



def test_a_study_file_corrected_after_a_misspelt_flag_starts_the_same_directory(tmp_path: Path,
                                                                                parser_flags: None) -> None:
    """The flag check (once the engine's defaults are read) stores nothing of the refused start: run
    again from the corrected file, the directory's study starts and measures its baseline (the
    spec was stored before that check: "this directory holds a different study")."""
    study, out = tmp_path / "study.json", tmp_path / "out"
    study.write_text(study_text("fixed", args={"max-num-seq": 4}, trials=1, measure_bandwidth=False))
    line = next(i for i, text in enumerate(study.read_text().splitlines(), 1) if '"max-num-seq"' in text)
    refused = servetune("tune", study, "--out", out, "--no-report")
    assert refused.code == 2 and "Traceback" not in refused.stderr, refused
    assert refused.error_lines[-1] == (f"error: {study}:{line}: engine.args.max-num-seq: the installed engine has "
                                       "no flag --max-num-seq (did you mean 'max-num-seqs'?) (test parser)")
    refused_store = StudyStore.open_existing(out, read_only=True)
    assert (refused_store.spec_doc(), refused_store.get_meta_json(known.DEFAULTS_META)) == (None, None)
    refused_store.close()
    study.write_text(study.read_text().replace('"max-num-seq"', '"max-num-seqs"'))
    started = servetune("tune", study, "--out", out, "--no-report")
    assert "different study" not in started.stderr, started
    store = StudyStore.open_existing(out, read_only=True)
    assert store.spec_doc() is not None and store.spec_doc()["engine"]["args"] == {"max-num-seqs": 4}
    assert [(t.role, t.outcome, t.config.flags) for t in store.trials()] == [("baseline", "ok", {"max-num-seqs": 4})]


def test_a_directory_whose_spec_an_older_servetune_stored_before_a_refused_flag_check_starts(
        tmp_path: Path, parser_flags: None) -> None:
    """An older servetune stored the spec (and the engine's defaults) before the flag check that
    then refused the start: with no trial there, the corrected file replaces that spec, says so in
    one line, and measures its baseline."""
    study, out = tmp_path / "study.json", tmp_path / "out"
    refused = study_text("fixed", args={"max-num-seq": 4}, trials=1, measure_bandwidth=False)
    store = StudyStore.in_dir(out)
    store.set_spec_doc(parse_study(refused).model_dump(mode="json"))
    store.set_meta_json(known.DEFAULTS_META, KNOWN.model_dump(mode="json"))
    store.close()
    study.write_text(refused.replace('"max-num-seq"', '"max-num-seqs"'))
    started = servetune("tune", study, "--out", out, "--no-report")
    assert started.code == 0 and "different study" not in started.stderr, started
    # rich wraps the line at the terminal's width, inside a long path too: compared without whitespace
    said = "".join((started.stdout + started.stderr).split())
    expected = (f"{out / StudyStore.FILENAME}: the stored study spec had no trial; replaced by this study file's "
                "(changed: engine)")
    assert "".join(expected.split()) in said, said
    store = StudyStore.open_existing(out, read_only=True)
    assert store.spec_doc() is not None and store.spec_doc()["engine"]["args"] == {"max-num-seqs": 4}
    assert [(t.role, t.outcome, t.config.flags) for t in store.trials()] == [("baseline", "ok", {"max-num-seqs": 4})]


# --- the real engine's parser --------------------------------------------------------------

@pytest.mark.slow
def test_init_then_dry_run_with_the_installed_vllm(tmp_path: Path) -> None:
    """The written file through `tune --dry-run` as a user runs it: vLLM's own parser is read (no boot)."""
    study = tmp_path / "study.yaml"
    model = tmp_path / "tiny"
    make_model("tiny", model)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cli = [sys.executable, "-m", "servetune"]
    subprocess.run([*cli, "init", str(study), "--model", str(model), "--gpus", "0"], check=True, env=env,
                   capture_output=True)
    done = subprocess.run([*cli, "tune", str(study), "--out", str(tmp_path / "out"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "vLLM 0.32.0 argument defaults" in done.stdout and "all known to the engine" in done.stdout
    assert not (tmp_path / "out").exists()
