"""The study file: the issue's example loads; bad input names file, line and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.engine.config import Config
from servetune.errors import ServetuneError
from servetune.load.scenario import PRESETS
from servetune.study import StudySpec, load_study, parse_study

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
TEXT = EXAMPLE.read_text()


def _error(text: str) -> str:
    with pytest.raises(ServetuneError) as info:
        parse_study(text, "study.yaml")
    return str(info.value)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("path", sorted((EXAMPLE.parent / "h200").glob("*.yaml")), ids=lambda p: p.name)
def test_every_h200_study_file_loads(path: Path) -> None:
    """A GPU session is short: a study file that fails to load there costs a whole call."""
    spec = load_study(path)
    assert spec.name == path.stem and spec.scenarios


def test_the_tensor_parallel_study_compares_per_gpu() -> None:
    spec = load_study(EXAMPLE.parent / "h200" / "qwen3-30b-a3b-tp.yaml")
    assert spec.objective.per_gpu and spec.space["tensor-parallel-size"].values == (None, 2)
    assert spec.baseline_config().env["NCCL_NVLS_ENABLE"] == "0"


def test_example_loads_unchanged() -> None:
    spec = load_study(EXAMPLE)
    assert spec.name == "tiny-cpu"
    assert spec.engine.command == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert spec.engine.args == {"load-format": "dummy", "max-model-len": 2048, "kv-cache-memory-bytes": "2GiB",
                                "max-num-seqs": 1, "enforce-eager": True}
    assert list(spec.space) == ["max-num-seqs", "max-num-batched-tokens", "enable-prefix-caching"]
    assert spec.space["enable-prefix-caching"].values == (True, False)
    assert spec.scenario_names == ["single-decode", "burst"]
    decode = spec.scenarios[0]
    # preset fields kept, overrides laid over
    assert (decode.input_len, decode.output_len, decode.num_prompts) == (128, 64, 16)
    assert decode.concurrency == PRESETS["single-decode"].concurrency
    assert spec.scenarios[1].concurrency == 8
    assert spec.objective.metric == "output_throughput" and spec.objective.maximizing
    assert spec.objective.slo_for("burst") == {"p90_ttft_ms": 5000}
    assert spec.strategy == "ofat"
    assert (spec.replicates.min, spec.replicates.max) == (3, 3)
    assert (spec.budget.trials, spec.budget.wall_minutes) == (12, 90)
    assert (spec.finalists, spec.baseline_every, spec.alpha, spec.seed) == (2, 3, 0.05, 0)


def test_dump_round_trips() -> None:
    spec = load_study(EXAMPLE)
    assert StudySpec.model_validate(spec.model_dump()) == spec
    assert StudySpec.model_validate_json(spec.model_dump_json()) == spec


def test_baseline_and_candidate_configs() -> None:
    text = TEXT.replace("  env: {}", "  env: {VLLM_CPU_OMP_THREADS_BIND: auto}").replace(
        "  enable-prefix-caching: [true, false]", "  enable-prefix-caching: [true, false]\n  env.VLLM_CPU_KVCACHE_SPACE: [1, 2]"
    )
    spec = parse_study(text)
    base = spec.baseline_config()
    assert base == Config.of(
        flags={"load-format": "dummy", "max-model-len": 2048, "kv-cache-memory-bytes": "2GiB", "max-num-seqs": 1,
               "enforce-eager": True},
        env={"VLLM_CPU_OMP_THREADS_BIND": "auto"},
    )
    cand = spec.config_for({"max_num_seqs": 4, "enable-prefix-caching": False, "env.VLLM_CPU_KVCACHE_SPACE": 2})
    assert cand.diff(base) == {
        "enable-prefix-caching": (None, False),
        "max-num-seqs": (1, 4),
        "env.VLLM_CPU_KVCACHE_SPACE": (None, "2"),
    }
    assert spec.config_for({}) == base
    # None means "the engine's default": the flag is left out, so the config equals the baseline
    assert spec.config_for({"enable-prefix-caching": None}).key() == base.key()
    with pytest.raises(ServetuneError, match="not a parameter"):
        spec.config_for({"max-num-seq": 4})


def test_space_names_are_normalised_and_ranges_parsed() -> None:
    text = TEXT.replace("  max-num-seqs: [4, 32]", "  max_num_seqs: {low: 4, high: 64, log: true}\n  gpu-memory-utilization: {low: 0.5, high: 0.9, step: 0.1}")
    spec = parse_study(text)
    assert spec.space["max-num-seqs"].kind == "int"
    assert spec.space["max-num-seqs"].enumerate("max-num-seqs") == (4, 8, 16, 32, 64)
    assert spec.space["gpu-memory-utilization"].kind == "float"


def test_replicates_forms() -> None:
    spec = parse_study(TEXT.replace("replicates: 3", "replicates: {min: 2, max: 6, target_rel_ci: 0.02}"))
    assert (spec.replicates.min, spec.replicates.max, spec.replicates.target_rel_ci) == (2, 6, 0.02)


ERRORS = [
    # (what, replace this, with this, expected text, line of this text in the edited file)
    ("unknown key", "replicates: 3", "replicate: 3", "replicate: unknown key 'replicate' (did you mean 'replicates'?)", "replicate: 3"),
    ("unknown nested key", "  max-num-seqs: [4, 32]", "  max-num-seqs: {low: 4, hihg: 32}",
     "space.max-num-seqs.hihg: unknown key 'hihg' (did you mean 'high'?)", "hihg"),
    ("unknown scenario key", "    concurrency: 8", "    concurency: 8",
     "scenarios[1].concurency: unknown key 'concurency' (did you mean 'concurrency'?)", "concurency"),
    ("unknown key beside a preset", "    output_len: 64", "    outptu_len: 64",
     "scenarios[0].outptu_len: unknown key 'outptu_len' (did you mean 'output_len'?)", "outptu_len"),
    ("wrong type", "  startup_timeout_s: 600", "  startup_timeout_s: soon", "engine.startup_timeout_s: Input should be a valid number", "soon"),
    ("wrong type of replicates", "replicates: 3", "replicates: many", "replicates: expected a number of replicates", "many"),
    ("bad value", "budget: {trials: 12", "budget: {trials: 0", "budget.trials: Input should be greater than or equal to 1", "budget"),
    ("bad strategy", "strategy: ofat ", "strategy: bayes ", "strategy: unknown strategy 'bayes'; known: baseline, grid, ofat, optuna", "bayes"),
    ("bad range", "  max-num-seqs: [4, 32]", "  max-num-seqs: {low: 32, high: 4}", "space.max-num-seqs: low (32) must be below high (4)", "low: 32"),
    ("duplicate values", "  max-num-seqs: [4, 32]", "  max-num-seqs: [4, 4]", "space.max-num-seqs: the list of values has duplicates", "[4, 4]"),
    ("unknown preset", "preset: single-decode", "preset: single-decod",
     "scenarios[0].preset: unknown scenario preset 'single-decod' (did you mean 'single-decode'?)", "single-decod"),
    ("a preset that is not a name", "preset: single-decode", "preset: []",
     "scenarios[0].preset: unknown scenario preset []; known:", "preset: []"),
    ("unknown weight scenario", "weights: {single-decode: 1, burst: 1}", "weights: {single-decode: 1, brust: 1}",
     "objective.weights.brust: no scenario named 'brust' (did you mean 'burst'?)", "brust"),
    ("negative weight", "weights: {single-decode: 1, burst: 1}", "weights: {single-decode: 1, burst: -1}",
     "objective.weights.burst: Input should be greater than or equal to 0", "weights"),
    ("unknown objective metric", "maximize: output_throughput", "maximize: output_thruput",
     "objective.maximize: unknown metric 'output_thruput' (did you mean 'output_throughput'?)", "thruput"),
    ("unknown slo metric", "slo: {p90_ttft_ms: 5000}", "slo:\n    p99_ttf_ms: 5000",
     "objective.slo.p99_ttf_ms: unknown metric 'p99_ttf_ms' (did you mean 'p99_ttft_ms'?)", "p99_ttf_ms"),
    ("unknown slo scenario", "slo: {p90_ttft_ms: 5000}", "slo:\n    brust: {p99_ttft_ms: 100}",
     "objective.slo.brust: no scenario named 'brust' (did you mean 'burst'?)", "brust"),
    ("missing key", "  model: ./models/tiny\n", "", "engine.model: required key is missing", "engine:"),
    ("reserved engine arg", "{load-format: dummy", "{port: 8000, load-format: dummy", "set engine.port instead of args.port", "port: 8000"),
    ("duplicate scenario name", "name: burst", "name: single-decode", "scenarios[1].name: scenario name 'single-decode' is used twice", "name: single-decode"),
    ("duplicate key", "replicates: 3", "replicates: 3\nreplicates: 4", "replicates: duplicate key (first given on line", "replicates: 4"),
    ("re-validation cap under 2", "replicates: 3", "replicates: 3\nrevalidation: {max_boots: 1}",
     "revalidation.max_boots: Input should be greater than or equal to 2", "max_boots: 1"),
    ("unknown re-validation key", "replicates: 3", "replicates: 3\nrevalidation: {max_boot: 4}",
     "revalidation.max_boot: unknown key 'max_boot' (did you mean 'max_boots'?)", "max_boot: 4"),
    ("yaml syntax", "budget: {trials: 12, wall_minutes: 90}", "budget: {trials: 12, wall_minutes: 90", "invalid YAML", None),
]


@pytest.mark.parametrize(("what", "old", "new", "expected", "line_text"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_file_line_and_key(what: str, old: str, new: str, expected: str, line_text: str | None) -> None:
    assert old in TEXT
    text = TEXT.replace(old, new)
    message = _error(text)
    assert expected in message
    if line_text is not None:
        assert f"study.yaml:{_line_of(text, line_text)}: " in message


def test_several_errors_are_reported_together() -> None:
    text = TEXT.replace("replicates: 3", "replicate: 3").replace("  startup_timeout_s: 600", "  startup_timeout_s: soon")
    message = _error(text)
    assert "replicate: unknown key" in message and "engine.startup_timeout_s" in message
    assert len(message.splitlines()) == 2


def test_missing_file_and_non_mapping() -> None:
    with pytest.raises(ServetuneError, match="cannot read"):
        load_study("/nonexistent/study.yaml")
    assert "study.yaml:1: a study is a mapping" in _error("- just\n- a list\n")
    assert "study.yaml:1: the file is empty" in _error("")
