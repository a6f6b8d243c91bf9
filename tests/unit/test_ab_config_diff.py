"""What differs between an A/B's two sides (ab/config_diff.py) and the study that toggles it
(ab/explain.py), on boot logs and argument defaults recorded from vLLM CPU 0.32.0 and 0.31.0
(tests/fixtures/logs/vllm03*-cpu-ab-boot.log: the start-up part of the e2e A/B's first boot of
each; tests/fixtures/defaults/: each version's parser read by engine/defaults.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.ab.analysis import DEFAULTS_META_KEY, analyze
from servetune.ab.config_diff import ConfigDiff, SideConfig, as_setting, diff_sides, normalise_warning
from servetune.ab.explain import explain_study, sides_by_age
from servetune.ab.render import markdown
from servetune.ab.spec import load_ab
from servetune.engine.bootfacts import BootFacts, parse_boot_facts
from servetune.engine.config import Config
from servetune.engine.defaults import EngineDefaults
from servetune.store import StudyStore, TrialRole
from servetune.study.loader import parse_study
from servetune.vocabulary import Outcome
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.standin import STANDIN, TINY_SCENARIO
from tests.unit.cli_run import servetune

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM = ["python", "-m", "vllm.entrypoints.openai.api_server"]
OLD_PYTHON = "/opt/vllm-0.31/bin/python"


def _facts(version: str) -> BootFacts:
    return parse_boot_facts((FIXTURES / "logs" / f"vllm{version}-cpu-ab-boot.log").read_text())


def _defaults(version: str) -> EngineDefaults:
    return EngineDefaults.model_validate(json.loads((FIXTURES / "defaults" / f"vllm{version}-cpu.json").read_text()))


def _side(version: str, flags: dict | None = None) -> SideConfig:
    return SideConfig([_facts(version)], _defaults(version), Config.of(flags or {}))


def _by_what(diff: ConfigDiff) -> dict[str, tuple[str, str, str]]:
    return {d.what: (d.source, d.a, d.b) for d in diff.differences}


def test_vllm_032_against_031_lists_the_real_differences_and_nothing_the_same() -> None:
    diff = diff_sides({"A": _side("032"), "B": _side("031")})
    found = _by_what(diff)
    assert diff.notes == []
    # a changed argument default: 0.31 disables cascade attention, 0.32 resolves it at start-up
    assert found["--disable-cascade-attn"] == ("argument default", "None (resolved at start-up)", "True")
    # flags 0.32 added (its negative spelling is not listed twice)
    assert found["--enable-shm-tensor-arena"] == ("argument default", "False", "- (no such flag)")
    assert "--no-enable-shm-tensor-arena" not in found
    # the compilation config grew decoder-replay CUDA graph fields and lost two pass-config fields
    assert found["compilation_config.cudagraph_decoder_replay"] == ("engine config", "True", "-")
    assert found["compilation_config.pass_config.enable_sp"] == ("engine config", "-", "False")
    # a warning only 0.31 logs, at every boot of this build
    assert found["Failed to import the DeepSelect extension (vllm._deepselect_C): No module named "
                 "'vllm._deepselect_C'"] == ("warning", "-", "logged")
    # what both run alike is not a difference: both CPU builds force async scheduling off, both
    # run the requested length, budget and KV cache; the launcher's port differs by boot only
    for same in ("async scheduling", "max model len", "chunked-prefill budget (max_num_batched_tokens)",
                 "KV cache size (tokens)", "port", "host", "max_seq_len", "compilation_config.cudagraph_mode"):
        assert same not in found
    assert not [d for d in diff.differences if d.source == "requested"]
    # set by: a JSON flag's field where the parsers take the flag, nothing where neither does
    flags = {d.what: d.flag for d in diff.differences}
    assert flags["compilation_config.cudagraph_decoder_replay"] == "compilation-config.cudagraph_decoder_replay"
    assert flags["observability_config.custom_histogram_buckets"] is None  # no --observability-config
    assert flags["compilation_config.pass_config.enable_sp"] is None  # a field of a field
    # warnings both versions log, with their own pids and paths, are not listed
    assert not [w for w in found if "LD_PRELOAD" in w or "SSM cache type" in w]


def test_backends_sampler_and_moe_kernel_config_are_compared() -> None:
    """A GPU MoE boot (vLLM 0.26 on an H200, a tuned MoE config loaded) against the same boot as
    it would read without the tuned file, with another attention backend and sampler."""
    tuned = parse_boot_facts((FIXTURES / "logs" / "vllm026-gpu-moe-mbt16k-noasync.log").read_text())
    untuned = tuned.model_copy(update={"moe_config_file": None, "default_moe_config": True,
                                       "attention_backend": "TRITON_ATTN", "sampler": "Using FlashInfer for "
                                       "top-p & top-k sampling."})
    found = _by_what(diff_sides({"A": SideConfig([untuned], None, Config()), "B": SideConfig([tuned], None, Config())}))
    assert found["MoE kernel config file"] == ("boot log", "-", "E=128,N=768,device_name=NVIDIA_H200.json")
    assert found["default MoE config (no tuned kernel config)"] == ("boot log", "True", "-")
    assert found["attention backend"] == ("boot log", "TRITON_ATTN", tuned.attention_backend)
    assert found["sampler"][1:] == ("Using FlashInfer for top-p & top-k sampling.", tuned.sampler)
    assert "MoE backend" not in found and "async scheduling" not in found


def test_warnings_differ_only_in_what_changes_between_boots() -> None:
    a = "force killing sub process VLLM::Worker pid 7932 at 08:53:18.123 (see /tmp/vllm_dist_e240994f4e4d4296/x.log)"
    b = "force killing sub process VLLM::Worker pid 15 at 21:42:26 (see /work/other/venv/x.log)"
    assert normalise_warning(a) == normalise_warning(b)
    assert normalise_warning("Explicitly set (1.0/14.09) GiB") == "Explicitly set (1.0/14.09) GiB"  # not a path
    assert normalise_warning("Using max 4 workers") != normalise_warning("Using max 8 workers")  # a real change


def test_a_warning_on_one_boot_of_a_side_is_neither_sides() -> None:
    def boot(*warnings: str) -> BootFacts:
        return BootFacts(warnings=list(warnings), engine_version="0.32.0")

    sides = {"A": SideConfig([boot("always A", "sometimes"), boot("always A")], None, Config()),
             "B": SideConfig([boot("always B"), boot("always B", "chance")], None, Config())}
    warnings = [(d.what, d.a, d.b) for d in diff_sides(sides).by_source("warning")]
    assert warnings == [("always A", "logged", "-"), ("always B", "-", "logged")]


def test_a_flag_either_side_sets_is_not_a_changed_default() -> None:
    diff = diff_sides({"A": _side("032"), "B": _side("031", {"disable-cascade-attn": True})})
    assert "--disable-cascade-attn" not in _by_what(diff)


def _ab_file(tmp_path: Path, b_args: dict | None = None, a_command: list[str] = VLLM,
             b_command: list[str] | None = None) -> Path:
    doc = {"name": "upgrade", "engine": {"command": a_command, "model": str(MODEL_WITHOUT_WEIGHTS),
                                         "args": {"load-format": "dummy", "max-model-len": 2048}},
           "scenarios": [TINY_SCENARIO], "replicates": 2,
           "ab": {"A": {}, "B": {"command": b_command or [OLD_PYTHON, *VLLM[1:]], **({"args": b_args} if b_args else {})}}}
    path = tmp_path / "ab.yaml"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def test_explain_boots_the_newer_side_with_each_changed_default_set_back(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path)])  # A: 0.32.0 (the project's), B: 0.31.0
    diff = diff_sides({"A": _side("032"), "B": _side("031")})
    versions = {"A": ["0.32.0"], "B": ["0.31.0"]}
    assert sides_by_age(versions) == ("A", "B")
    text, toggles = explain_study(spec, diff, versions, "runs/ab", "explain.yaml")
    assert text is not None and [(t.param, t.value) for t in toggles] == [("disable-cascade-attn", True)]
    study = parse_study(text, "explain.yaml")
    assert study.engine.command == VLLM  # the newer version, as the A/B ran it
    assert "\n  command: [python, -m, vllm.entrypoints.openai.api_server]\n" in text  # said, though the default
    assert study.engine.args == {"load-format": "dummy", "max-model-len": 2048}
    # 0.31's default set back on 0.32; flags 0.31 lacks and fields no flag sets are not toggled
    assert {name: p.values for name, p in study.space.items()} == {"disable-cascade-attn": (True,)}
    assert study.strategy == "ofat" and study.name == "upgrade-explain"
    assert [s.name for s in study.scenarios] == [TINY_SCENARIO["name"]] and study.replicates.max == 2
    assert "# argument default: --disable-cascade-attn: B None (resolved at start-up)" not in text
    assert "--disable-cascade-attn: B True, A None (resolved at start-up)" in text


def test_explain_of_an_upgrade_b_toggles_its_new_defaults_off_first(tmp_path: Path) -> None:
    """The field report's upgrade: the new version turned async scheduling on and halved the
    budget; the study sets both back to the old version's values, in the report's order."""
    spec = load_ab([_ab_file(tmp_path)])
    old = BootFacts(engine_version="0.19.0", async_scheduling=False, max_num_batched_tokens=16384,
                    kv_cache_device="GPU")
    new = BootFacts(engine_version="0.19.1rc1.dev231+g9dd5ee011", async_scheduling=True,
                    max_num_batched_tokens=8192, kv_cache_device="GPU")
    flags = ["async-scheduling", "no-async-scheduling", "max-num-batched-tokens", "model"]
    defaults = EngineDefaults(known=True, flags=flags)
    diff = diff_sides({"A": SideConfig([old], defaults, Config()), "B": SideConfig([new], defaults, Config())})
    versions = {"A": ["0.19.0"], "B": ["0.19.1rc1.dev231+g9dd5ee011"]}
    text, toggles = explain_study(spec, diff, versions, "runs/ab", "explain.yaml")
    assert [(t.param, t.value) for t in toggles] == [("async-scheduling", False), ("max-num-batched-tokens", 16384)]
    assert text is not None and parse_study(text, "x.yaml").engine.command[0] == OLD_PYTHON  # B, the newer


def test_explain_toggles_nothing_the_new_side_sets_itself(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path, b_args={"load-format": "dummy", "disable-cascade-attn": False},
                             a_command=[OLD_PYTHON, *VLLM[1:]], b_command=VLLM)])  # B: 0.32, sets the flag
    diff = diff_sides({"A": _side("031"), "B": _side("032")})
    text, toggles = explain_study(spec, diff, {"A": ["0.31.0"], "B": ["0.32.0"]}, "runs/ab", "e.yaml")
    assert (text, toggles) == (None, [])


def test_the_report_lists_the_differences_under_the_verdict(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path)])
    store = StudyStore.in_dir(tmp_path / "out")
    for role, version in ((TrialRole.ab_a, "032"), (TrialRole.ab_b, "031")):
        trial = store.begin_trial(role, Config(), {})
        store.record_boot(trial.id, healthy_at=1.0, boot_facts=_facts(version), mismatches=[], log_path=None)
        store.finish_trial(trial.id, Outcome.ok)
    store.set_meta_json(DEFAULTS_META_KEY, {"A": _defaults("032").model_dump(mode="json"),
                                            "B": _defaults("031").model_dump(mode="json")})
    text = markdown(analyze(store, spec))
    verdict_at, differences_at = text.index("| scenario | metric |"), text.index("### What differs between A and B")
    assert verdict_at < differences_at < text.index("### Boots")
    assert "| argument default | --disable-cascade-attn | None (resolved at start-up) | True | " \
           "disable-cascade-attn |" in text


def test_an_ab_without_stored_defaults_says_so(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path)])
    result = analyze(StudyStore.in_dir(tmp_path / "out"), spec)
    assert result.config.notes[0] == "A: no boot log was parsed: its resolved configuration is unknown"
    assert "A: argument defaults not compared (not recorded)" in result.config.notes


def _standin_ab(tmp_path: Path) -> Path:
    """A runs a budget of 1024 tokens, B the stand-in's default (2048): B's default differs."""
    doc = {"name": "standin-ab", "engine": {"command": ["python", str(STANDIN)], "model": str(MODEL_WITHOUT_WEIGHTS),
                                            "startup_timeout_s": 20},
           "scenarios": [TINY_SCENARIO], "replicates": 2,
           "ab": {"A": {"args": {"max-num-batched-tokens": 1024}}, "B": {}}}
    path = tmp_path / "ab.yaml"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def test_cli_explain_writes_a_study_that_plans_and_never_overwrites(tmp_path: Path) -> None:
    path, out, explain = _standin_ab(tmp_path), tmp_path / "out", tmp_path / "explain.yaml"
    done = servetune("ab", path, "--out", out, "--boots", "1", "--explain", explain)
    assert done.code == 0, done.stdout + done.stderr
    assert "What differs between A and B" in done.stdout + done.stderr
    study = parse_study(explain.read_text(), str(explain))
    assert {name: p.values for name, p in study.space.items()} == {"max-num-batched-tokens": (1024,)}
    assert "args" not in study.engine.model_dump(exclude_defaults=True)  # B's engine: no flags of its own
    assert "| boot log | chunked-prefill budget (max_num_batched_tokens) | 1024 | 2048 |" in (out / "ab.md").read_text()
    planned = servetune("plan", explain)
    assert planned.code == 0, planned.stdout + planned.stderr

    before = explain.read_text()
    again = servetune("ab", path, "--out", out, "--boots", "1", "--explain", explain)
    assert again.code == 2
    assert again.error_lines == [f"error: --explain {explain}: exists; pass --force to overwrite it, or name another "
                                 "file"]
    assert explain.read_text() == before
    forced = servetune("ab", path, "--out", out, "--boots", "1", "--explain", explain, "--force")
    assert forced.code == 0, forced.stdout + forced.stderr


def test_a_logged_value_becomes_what_its_flag_takes() -> None:
    assert [as_setting(v) for v in ("<CUDAGraphMode.PIECEWISE: 1>", "True", "8192", "torch.bfloat16", "auto",
                                     "None", "[1, 2]", "ObservabilityConfig(a=1)")] == [
        "PIECEWISE", True, 8192, "bfloat16", "auto", None, None, None]


@pytest.mark.parametrize("versions,expected", [
    ({"A": ["0.31.0"], "B": ["0.32.0"]}, ("B", "A")),
    ({"A": ["0.32.0"], "B": ["0.31.0"]}, ("A", "B")),
    ({"A": [], "B": ["0.31.0"]}, ("B", "A")),  # unknown: B is the upgrade, by the A/B's convention
    ({"A": ["0.32.0"], "B": ["0.32.0"]}, ("B", "A")),
])
def test_the_newer_side_is_the_higher_version(versions: dict, expected: tuple[str, str]) -> None:
    assert sides_by_age(versions) == expected
