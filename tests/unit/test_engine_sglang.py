"""SGLang behind the engine seam, on real SGLang output (tests/fixtures/SGLANG.md says where each
fixture came from): its boot facts, the applied check from its ServerArgs line, its failure
classes, its /metrics names, its command line and deployment, and what a study of it may ask."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from servetune.engine import SglangEngine, build_engine, profile_for
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.defaults import EngineDefaults
from servetune.engine.equivalence import Booted, same_server
from servetune.engine.profile import Capability
from servetune.engine.registry import block_pool_tokens
from servetune.engine.sglang import render_sglang_flags
from servetune.engine.sglang_log import check_sglang_applied, classify_sglang_failure, parse_sglang_boot
from servetune.errors import ServetuneError
from servetune.load.options import RunOptions
from servetune.load.scrape import counter_values, parse_values
from servetune.report.emit import Deployment, compose_service, k8s_container, serve_command
from servetune.study.spec import SpecError, StudySpec
from servetune.vocabulary import ANY_ENGINE_METRIC_NAMES, SGLANG_METRIC_NAMES, Outcome

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "logs"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_boot_facts_from_a_real_boot_s_memory_pool_and_cuda_graph_lines() -> None:
    f = parse_sglang_boot(_log("sglang-pr11830-boot.log"))
    assert f.engine == "sglang"
    assert f.kv_cache_tokens == 2243474 and f.kv_cache_memory_gib == pytest.approx(59.91 * 2)
    assert f.memory_pool_free_gib == 40.03
    assert len(f.cuda_graph_batch_sizes) == 52 and f.cuda_graph_batch_sizes[-1] == 512
    assert f.cuda_graph_seconds == 5.37 and f.cuda_graph_gib == 1.44
    assert f.warnings == ["Attention backend not explicitly specified. Use flashinfer backend by default."]


def test_boot_facts_from_the_scheduler_line_of_each_pipeline_stage() -> None:
    f = parse_sglang_boot(_log("sglang-pr13075-pp2-ready.log"))
    assert f.kv_cache_tokens == 2524524 and f.max_running_requests == 4096
    assert f.max_model_len == 128000 and f.max_num_batched_tokens == 8192
    assert f.cuda_graph_seconds == 5.74  # the last rank's
    assert "max_total_num_tokens=2524524" in f.evidence["kv_cache_tokens"]


def test_the_server_args_line_is_read_whole_and_drives_the_applied_check() -> None:
    f = parse_sglang_boot(_log("sglang-docs-offline-engine-server-args.log"))
    args = f.resolved_args
    assert args["mem_fraction_static"] == 0.835 and args["max_running_requests"] == 128
    assert args["chunked_prefill_size"] == 8192 and args["schedule_policy"] == "fcfs"
    assert args["disable_radix_cache"] is False and args["cuda_graph_bs"][:3] == [1, 2, 4]
    assert f.attention_backend == "fa3"
    asked = Config.of({"chunked-prefill-size": 8192, "schedule-policy": "fcfs", "mem-fraction-static": 0.835,
                       "tp": 1, "served-model-name": "anything"})
    assert check_sglang_applied(asked, f) == []
    wrong = Config.of({"chunked-prefill-size": 4096, "disable-radix-cache": True, "no-such-flag": 1})
    found = {m.flag: m for m in check_sglang_applied(wrong, f)}
    assert found["chunked-prefill-size"].applied == 8192 and found["disable-radix-cache"].applied is False
    assert found["no-such-flag"].applied is None and "no field 'no_such_flag'" in found["no-such-flag"].reason


def test_a_boot_without_a_server_args_line_proves_and_contradicts_nothing() -> None:
    f = parse_sglang_boot(_log("sglang-pr13075-pp2-ready.log"))
    assert check_sglang_applied(Config.of({"chunked-prefill-size": 4096}), f) == []


@pytest.mark.parametrize(("log", "outcome"), [
    ("sglang-issue4330-not-enough-memory.log", Outcome.oom),
    ("sglang-issue7691-profiled-negative.log", Outcome.oom),
])
def test_real_start_up_failures_are_classified(log: str, outcome: Outcome) -> None:
    failure = classify_sglang_failure(_log(log), 1)
    assert failure.outcome is outcome and failure.evidence


def test_argparse_refusals_context_and_unknown_crashes() -> None:
    refused = classify_sglang_failure("launch_server.py: error: unrecognized arguments: --max-num-seqs 4", 2)
    assert refused.outcome is Outcome.invalid_arg
    too_long = classify_sglang_failure("ValueError: User-specified context_length (65536) is greater than the "
                                       "derived context_length (32768). This may lead to ...", 1)
    assert too_long.outcome is Outcome.context_too_long
    crashed = classify_sglang_failure("Traceback (most recent call last):\nRuntimeError: boom", 1)
    assert crashed.outcome is Outcome.crashed and crashed.evidence == ["RuntimeError: boom"]


def test_metrics_are_read_under_sglang_s_family_names() -> None:
    gauges = parse_values((FIXTURES / "metrics" / "sglang-0.5.1-issue13485.txt").read_text(),
                          dict(SGLANG_METRIC_NAMES.gauges))
    assert gauges == {"running": 1.0, "kv_cache_usage": 0.0}
    counters = counter_values((FIXTURES / "metrics" / "sglang-pr1853-counters.txt").read_text(), SGLANG_METRIC_NAMES)
    assert counters == {"prompt_tokens": 230794.0}
    # a server known by its URL alone (bench, capacity, soak --url) is read under every engine's names
    assert counter_values((FIXTURES / "metrics" / "sglang-pr1853-counters.txt").read_text()) == counters
    assert RunOptions().metric_names == ANY_ENGINE_METRIC_NAMES


def test_the_command_line_speaks_sglang(tmp_path: Path) -> None:
    engine = SglangEngine(["python", "-m", "sglang.launch_server"], model="/m", log_dir=tmp_path)
    argv = engine.build_command(Config.of({"disable-radix-cache": True, "enable-mixed-chunk": False,
                                           "chunked-prefill-size": 4096, "port": 1}), 3000)
    assert argv[1:] == ["-m", "sglang.launch_server", "--model-path", "/m", "--disable-radix-cache",
                        "--chunked-prefill-size", "4096", "--enable-metrics", "--host", "127.0.0.1", "--port", "3000"]
    assert render_sglang_flags({"disable-radix-cache": False}) == []  # never a --no- form


def test_the_deployment_is_an_sglang_launch_line_and_its_image() -> None:
    engine = {"kind": "sglang", "model": "Qwen/Qwen3-8B"}
    dep = Deployment.of(Config.of({"chunked-prefill-size": 4096, "disable-radix-cache": True, "port": 1}), engine,
                        "0.5.15")
    assert serve_command(dep) == ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B "
                                  "--chunked-prefill-size 4096 --disable-radix-cache")
    assert dep.image == "lmsysorg/sglang:v0.5.15"
    service = compose_service(dep)["services"]["sglang"]
    assert service["ports"] == ["30000:30000"]
    assert service["command"] == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                                  "--chunked-prefill-size", "4096", "--disable-radix-cache", "--host", "0.0.0.0",
                                  "--port", "30000"]
    container = k8s_container(dep)
    assert container["command"] == service["command"] and "args" not in container
    assert container["readinessProbe"]["httpGet"]["port"] == 30000


def test_stored_boot_facts_with_vllm_version_still_read() -> None:
    old = BootFacts.model_validate_json('{"vllm_version": "0.26.0", "kv_cache_tokens": 10}')
    assert old.engine == "vllm" and old.engine_version == "0.26.0" and old.kv_cache_tokens == 10
    assert BootFacts(engine_version="1").model_dump()["engine_version"] == "1"


def _study(engine: dict, space: dict | None = None) -> dict:
    return {"name": "s", "engine": {"model": "m", **engine}, "space": space or {},
            "scenarios": [{"name": "a", "input_len": 8, "output_len": 4, "concurrency": 1, "num_prompts": 2}]}


def test_an_sglang_study_gets_its_command_and_its_reserved_args() -> None:
    spec = StudySpec.model_validate(_study({"kind": "sglang"}))
    assert spec.engine.command == ["python", "-m", "sglang.launch_server"]
    with pytest.raises(ValidationError, match="set engine.model instead of args.model-path"):
        StudySpec.model_validate(_study({"kind": "sglang", "args": {"model-path": "x"}}))
    with pytest.raises(ValidationError, match="a secret flag is not supported for sglang"):
        StudySpec.model_validate(_study({"kind": "sglang", "args": {"api-key": "s3cret-value"}}))


def test_vllm_only_features_are_refused_in_one_line_for_sglang(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="^space.speculative-config: speculative sweep is not supported for sglang$"):
        StudySpec.model_validate(_study({"kind": "sglang"}, {"speculative-config": [{"method": "ngram"}]}))
    with pytest.raises(ServetuneError, match="^probe context: context probe is not supported for sglang$"):
        build_engine("sglang", None, "m", startup_timeout_s=1, log_dir=tmp_path, needs=Capability.context_probe,
                     where="probe context")
    assert profile_for("vllm").supports(Capability.context_probe)
    with pytest.raises(SpecError, match="^engine.pin_engine_core: EngineCore pinning is not supported for sglang$"):
        StudySpec.model_validate(_study({"kind": "sglang", "pin_engine_core": True}))
    assert StudySpec.model_validate(_study({"kind": "vllm", "pin_engine_core": True})).engine.pin_engine_core


def test_a_trace_s_block_pool_replay_is_vllm_s_alone() -> None:
    assert block_pool_tokens(BootFacts(engine="vllm", kv_cache_tokens=4096)) == 4096
    assert block_pool_tokens(parse_sglang_boot(_log("sglang-pr13075-pp2-ready.log"))) is None  # a radix cache


def test_an_engine_comparison_names_every_section_in_its_space() -> None:
    two = {"engines": {"sglang": {"args": {"chunked-prefill-size": 4096}}}}
    spec = StudySpec.model_validate({**_study({"kind": "vllm"}, {"engine.kind": ["vllm", "sglang"]}), **two})
    assert spec.engines["sglang"].model == "m" and spec.engine_kinds == ["vllm", "sglang"]
    sglang = spec.config_for({"engine.kind": "sglang"})
    assert sglang.engine == "sglang" and sglang.flags == {"chunked-prefill-size": 4096}
    assert spec.config_for({"engine.kind": "vllm"}) == spec.baseline_config()
    assert sglang.key() != spec.baseline_config().key() and "engine" not in spec.baseline_config().model_dump()
    with pytest.raises(SpecError, match="no space key 'engine.kind' chooses among the engines"):
        StudySpec.model_validate({**_study({"kind": "vllm"}), **two})
    with pytest.raises(SpecError, match="each engine's flags go in its own section's args"):
        StudySpec.model_validate({**_study({"kind": "vllm"}, {"engine.kind": ["vllm", "sglang"],
                                                              "max-num-seqs": [4]}), **two})
    with pytest.raises(SpecError, match="'tgi' has no engine section"):
        StudySpec.model_validate({**_study({"kind": "vllm"}, {"engine.kind": ["vllm", "sglang", "tgi"]}), **two})


def test_equal_flags_on_two_engines_are_never_the_same_server() -> None:
    vllm = Booted("the baseline (#1)", Config.of({}), BootFacts())
    assert same_server(Config.of({}), BootFacts(), vllm, EngineDefaults()) == []  # the same engine: a duplicate
    sglang = Config(flags={}, env={}, engine="sglang")
    assert same_server(sglang, BootFacts(engine="sglang"), vllm, EngineDefaults()) is None
