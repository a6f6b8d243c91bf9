"""Studies with `kind: sglang`, end to end through `servetune tune --report`, on the SGLang
stand-in (tests/fakes/sglang_standin.py: real SGLang log lines, /metrics families and
/flush_cache); and a study comparing engines (a vLLM stand-in against an SGLang stand-in) on the
same scenarios, judged with the same statistics. Nothing here times anything: the stand-ins'
speeds differ many times over, far beyond any scheduling noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.analysis import analysis
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from tests.fakes import MODEL_WITHOUT_WEIGHTS, standin
from tests.faults.test_standin_faults import STUDY_TIMEOUT_S

pytestmark = pytest.mark.concurrent

SGLANG_STANDIN = Path(__file__).resolve().parents[1] / "fakes" / "sglang_standin.py"
SCENARIO = {"name": "tiny", "input_len": 16, "output_len": 16, "concurrency": 2, "num_prompts": 8, "warmups": 1}


def _tune(tmp_path: Path, spec: dict, marks: list[str]) -> tuple[Path, StudyStore]:
    study_file, out = tmp_path / "study.yaml", tmp_path / "out"
    study_file.write_text(json.dumps(spec))
    mark = standin.new_mark()
    marks.append(mark)
    done = standin.run_tuner(study_file, out, mark, timeout_s=STUDY_TIMEOUT_S, report=True)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    return out, StudyStore.open_existing(out, read_only=True)


def _sglang_section(args: dict) -> dict:
    return {"kind": "sglang", "command": ["python", str(SGLANG_STANDIN)], "model": str(MODEL_WITHOUT_WEIGHTS),
            "args": args, "startup_timeout_s": 20}


def _study(name: str, engine: dict, space: dict, **extra: object) -> dict:
    return {"name": name, "engine": engine, "space": space, "scenarios": [SCENARIO],
            "objective": {"maximize": "output_throughput"}, "strategy": "grid", "replicates": 2, "finalists": 1,
            "measure_bandwidth": False, **extra}


def test_an_sglang_study_runs_to_a_report_with_an_sglang_launch_line(tmp_path: Path, marks: list[str]) -> None:
    spec = _study("sglang-standin", _sglang_section({"itl-ms": 4, "schedule-policy": "fcfs"}),
                  {"itl-ms": [1], "chunked-prefill-size": [2048, 4096]})
    out, store = _tune(tmp_path, spec, marks)
    trials = store.trials()
    configs = {t.config.key() for t in trials}
    assert len(configs) >= 3
    ok = [t for t in trials if t.outcome == "ok"]
    assert ok and all(t.boot_facts is not None and t.boot_facts.engine == "sglang" for t in ok)
    for t in ok:   # the stand-in's scheduler line, read as SGLang's, and every flag proven applied
        facts = t.boot_facts
        assert facts is not None and facts.kv_cache_tokens == 20480 and facts.max_running_requests == 128
        assert facts.max_num_batched_tokens == t.config.flags.get("chunked-prefill-size", 8192)
        assert facts.resolved_args["enable_metrics"] is True
    runs = [r for t in ok for r in t.runs if r.ok]
    assert runs and all(r.server_stats.get("generation_tokens", 0) > 0 for r in runs)  # sglang: families
    logs = [p.read_text() for p in out.rglob("*.log")]
    flushes = sum(text.count("Cache flushed successfully!") for text in logs)
    assert flushes >= len(runs)  # /flush_cache before every run

    result = analysis.analyze(store, StudySpec.model_validate(spec))
    assert result.winner is not None and result.winner.config.flags["itl-ms"] == 1
    serve = next(out.rglob("serve.sh")).read_text()
    assert "python3 -m sglang.launch_server --model-path" in serve and "--itl-ms 1" in serve
    assert "vllm" not in serve
    compose = next(out.rglob("docker-compose.yaml")).read_text()
    # the stand-in's version is unknown: no image is derived, the container runs SGLang's launcher
    assert "image: REPLACE-WITH-THE-MEASURED-IMAGE" in compose and "- sglang.launch_server" in compose


def test_vllm_and_sglang_compared_on_the_same_scenarios(tmp_path: Path, marks: list[str]) -> None:
    vllm = {"kind": "vllm", "command": ["python", str(standin.STANDIN)], "model": str(MODEL_WITHOUT_WEIGHTS),
            "args": {"itl-ms": 20, "max-model-len": 1024}, "startup_timeout_s": 20}
    spec = _study("engines", vllm, {"engine.kind": ["vllm", "sglang"]},
                  engines={"sglang": _sglang_section({"itl-ms": 1})})
    out, store = _tune(tmp_path, spec, marks)
    trials = [t for t in store.trials() if t.outcome == "ok"]
    engines = {t.boot_facts.engine for t in trials if t.boot_facts is not None}
    assert engines == {"vllm", "sglang"}
    for t in trials:   # each config booted on its own engine section
        assert t.boot_facts is not None
        assert t.boot_facts.engine == (t.config.engine or "vllm")
    scenarios = {(t.boot_facts.engine, r.scenario) for t in trials if t.boot_facts for r in t.runs if r.ok}
    assert scenarios == {("vllm", "tiny"), ("sglang", "tiny")}

    result = analysis.analyze(store, StudySpec.model_validate(spec))
    sglang = next(c for c in result.configs if not c.is_baseline)
    # what differs from the baseline: the engine and its section's args (vLLM's max-model-len is not SGLang's)
    assert sglang.label == "engine.kind=sglang itl-ms=1 max-model-len=None"
    effect = sglang.objective_effect
    assert effect is not None and effect.verdict == "better" and effect.ci_low_pct > 0   # an effect with its interval
    assert result.winner is not None and result.winner.config.engine == "sglang"
    serve = next(out.rglob("serve.sh")).read_text()
    assert "python3 -m sglang.launch_server" in serve   # the winner deploys on its own engine
