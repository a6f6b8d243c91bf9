"""A small study store written through StudyStore's own API, with per-request JSONL files, and a
StudyAnalysis built by hand from it with servetune.stats (analyze() is the tuner's job; the
report only renders what it is given)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servetune.analysis.types import (
    ConfigResult,
    DriftPoint,
    Effect,
    Estimate,
    ScenarioResult,
    StudyAnalysis,
)
from servetune.engine.applied import AppliedMismatch
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.load.metrics import summarize
from servetune.load.records import RequestRecord, RunResult
from servetune.stats.compare import compare
from servetune.stats.intervals import mean_ci
from servetune.store import TrialRole
from servetune.store.sqlite import StudyStore
from servetune.study.metrics import higher_is_better
from servetune.study.spec import StudySpec
from servetune.vocabulary import Outcome

SPEC_INPUT = {
    "name": "tiny-cpu",
    "engine": {"kind": "vllm", "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
               "model": "./models/tiny", "args": {"load-format": "dummy", "max-model-len": 2048, "max-num-seqs": 4}},
    "space": {"max-num-seqs": [4, 32], "enable-prefix-caching": [True, False],
              "max-num-batched-tokens": [256, 999999]},
    "scenarios": [{"preset": "single-decode", "input_len": 128, "output_len": 16, "num_prompts": 16},
                  {"name": "burst", "input_len": 128, "output_len": 16, "concurrency": 8, "num_prompts": 16}],
    "objective": {"maximize": "output_throughput", "slo": {"p99_ttft_ms": 5000}},
    "replicates": 3,
}
SPEC = StudySpec.model_validate(SPEC_INPUT).model_dump(mode="json")
BASE = StudySpec.model_validate(SPEC_INPUT).baseline_config()
FAST = BASE.merged(Config.of({"max-num-seqs": 32}, {"VLLM_CPU_OMP_THREADS_BIND": "all"}))
SAME = BASE.merged(Config.of({"enable-prefix-caching": False}))
OOM = BASE.merged(Config.of({"max-num-batched-tokens": 999999}))
SCENARIOS = ("single-decode", "burst")
OOM_LOG = ("INFO 11-30 07:29:17 [core.py:1] starting\n"
           "ERROR 11-30 07:29:20 [core.py:2] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
           "INFO 11-30 07:29:21 [core.py:3] shutting down\n")
METRICS = ("output_throughput", "request_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms")


def _records(rng: np.random.Generator, n: int, ttft_ms: float, itl_ms: float, out_len: int) -> list[RequestRecord]:
    recs, t = [], 0
    for i in range(n):
        dispatch = t
        first = dispatch + int(rng.gamma(8.0, ttft_ms / 8.0) * 1e6)
        gaps = rng.gamma(10.0, itl_ms / 10.0, size=out_len - 1) * 1e6
        chunks = [first, *(first + np.cumsum(gaps)).astype(int).tolist()]
        recs.append(RequestRecord(index=i, input_len=128, output_len=out_len, scheduled_ns=dispatch,
                                  dispatch_ns=dispatch, first_token_ns=first, chunk_ns=chunks,
                                  chunk_tokens=[1] * out_len, end_ns=chunks[-1], prompt_tokens=128,
                                  output_tokens=out_len))
        t = chunks[-1] + 1_000
    return recs


# The engine kind a study ran -> the command its spec names and the version its boots log.
ENGINE_RUNS = {"vllm": (["python", "-m", "vllm.entrypoints.openai.api_server"], "0.32.0"),
               "sglang": (["python3", "-m", "sglang.launch_server"], "0.5.15")}


def _trial(store: StudyStore, root: Path, role: str, config: Config, speed: float, rng: np.random.Generator,
           t0: float, engine: str = "vllm") -> int:
    trial = store.begin_trial(TrialRole(role), config, {"max-num-seqs": config.flags.get("max-num-seqs")})
    store.record_boot(trial.id, healthy_at=trial.started_at + 80.0,
                      boot_facts=BootFacts(engine=engine, engine_version=ENGINE_RUNS[engine][1], kv_cache_tokens=58240, max_concurrency=28.44,
                                          startup_seconds=80.0),
                      mismatches=[AppliedMismatch(flag="max-num-seqs", requested=32, applied=16, evidence_line=None,
                                                  reason="capped by the platform")]
                      if role == "candidate" and speed > 1.1 else [], log_path=None)
    for scenario in SCENARIOS:
        for rep in range(3):
            recs = _records(rng, 16, ttft_ms=40.0 / speed, itl_ms=8.0 / speed, out_len=16)
            path = root / f"records-{trial.id}-{scenario}-{rep}.jsonl"
            path.write_text("".join(r.model_dump_json() + "\n" for r in recs))
            duration = (recs[-1].end_ns - recs[0].dispatch_ns) / 1e9
            stats = {"preemptions": 0.0 if speed > 1.1 else 3.0, "peak_kv_cache_usage": 0.3 if speed > 1.1
                     else 0.97, "prefix_cache_queries": 100.0, "prefix_cache_hits": 0.0, "peak_waiting": 0.0}
            result = RunResult(scenario=scenario, summary=summarize(recs, duration), server_stats=stats,
                               records_path=path.name)
            store.record_run(trial.id, rep, result, started_at=t0, ended_at=t0 + duration + 2.0)
    store.finish_trial(trial.id, Outcome.ok)
    return trial.id


def build_study(root: Path, *, with_winner: bool = True, engine: str = "vllm") -> tuple[StudyStore, StudyAnalysis]:
    """`engine`: the kind the study's spec names and its boots' logs were written by."""
    rng = np.random.default_rng(7)
    store = StudyStore.in_dir(root)
    spec_input = {**SPEC_INPUT, "engine": {**SPEC_INPUT["engine"], "kind": engine, "command": ENGINE_RUNS[engine][0]}}
    store.set_meta_json("spec", StudySpec.model_validate(spec_input).model_dump(mode="json"))
    session = store.begin_session()
    # the tuner ran ten minutes (the ETA log below falls inside them), not the instant this takes
    store._conn.execute("UPDATE sessions SET started_at = started_at - 600 WHERE id = ?", (session,))
    t0 = store.sessions()[0].started_at
    base_ids = [_trial(store, root, "baseline", BASE, 1.0, rng, t0, engine)]
    fast_id = _trial(store, root, "candidate", FAST, 1.3 if with_winner else 1.0, rng, t0, engine)
    same_id = _trial(store, root, "candidate", SAME, 1.0, rng, t0, engine)
    oom = store.begin_trial(TrialRole.candidate, OOM, {})
    store.finish_trial(oom.id, Outcome.oom, detail="CUDA out of memory while profiling", log_tail=OOM_LOG)
    base_ids.append(_trial(store, root, "baseline_check", BASE, 1.0, rng, t0, engine))
    store.end_session(session, "done")
    end = store.sessions()[-1].ended_at
    store.set_meta_json("eta_log", [{"trial_seq": 1, "at": end - 500.0, "predicted_end": end + 100.0},
                                    {"trial_seq": 4, "at": end - 100.0, "predicted_end": end - 10.0}])

    runs = store.runs()

    def values(trial_ids: list[int], scenario: str, metric: str) -> list[float]:
        return [r.summary[metric] for r in runs if r.trial_id in trial_ids and r.scenario == scenario]

    def result(key_cfg: Config, trial_ids: list[int], label: str, is_baseline: bool) -> ConfigResult:
        scen = {}
        for s in SCENARIOS:
            ests = {}
            for m in METRICS:
                iv = mean_ci(values(trial_ids, s, m))
                ests[m] = Estimate(iv.estimate, iv.low, iv.high, iv.n)
            effects = {}
            if not is_baseline:
                for m in METRICS:
                    c = compare(values(base_ids, s, m), values(trial_ids, s, m), higher_is_better=higher_is_better(m))
                    verdict = ("no_difference" if c.p_value >= 0.05 else
                               "better" if c.improvement_pct > 0 else "worse")
                    effects[m] = Effect(m, c.effect_pct, c.ci_low_pct, c.ci_high_pct, c.p_value, None, verdict)
            server = {k: float(np.mean([r.server_stats[k] for r in runs if r.trial_id in trial_ids
                                        and r.scenario == s])) for k in runs[0].server_stats}
            scen[s] = ScenarioResult(s, 3, ests, effects, server=server)
        obj = [np.mean([r.summary["output_throughput"] / np.mean(values(base_ids, r.scenario, "output_throughput"))
                        for r in runs if r.trial_id in trial_ids and r.replicate == rep]) for rep in range(3)]
        iv = mean_ci(obj)
        eff = None
        if not is_baseline:
            c = compare([1.0, 1.0, 1.0], obj, higher_is_better=True)
            eff = Effect("objective", c.effect_pct, c.ci_low_pct, c.ci_high_pct, c.p_value, min(1.0, c.p_value * 2),
                         "better" if c.p_value * 2 < 0.05 and c.effect_pct > 0 else "no_difference")
        return ConfigResult(key=key_cfg.key(), config=key_cfg, params={}, label=label, trial_ids=trial_ids,
                            outcome="ok", scenarios=scen, objective=Estimate(iv.estimate, iv.low, iv.high, iv.n),
                            objective_samples=obj, objective_effect=eff, is_baseline=is_baseline)

    base = result(BASE, base_ids, "baseline", True)
    fast = result(FAST, [fast_id], FAST.label(BASE), False)
    same = result(SAME, [same_id], SAME.label(BASE), False)
    oom_res = ConfigResult(key=OOM.key(), config=OOM, params={}, label=OOM.label(BASE), trial_ids=[oom.id],
                           outcome="oom", feasible=False)
    winner = fast if with_winner else None
    drift = [DriftPoint(t.id, t.seq, t.started_at + 60.0 * i, s, "output_throughput",
                        float(np.mean(values([t.id], s, "output_throughput"))))
             for i, t in enumerate(store.trials()) if t.id in base_ids for s in SCENARIOS]
    analysis = StudyAnalysis(
        study_name="tiny-cpu", objective_metric="output_throughput", objective_direction="maximize",
        baseline=base, configs=[base, fast, same, oom_res], winner=winner,
        winner_reason="beats the baseline on the objective after Holm correction and meets every SLO"
        if with_winner else "no candidate beat the baseline significantly", drift=drift)
    return store, analysis


def chromium_check(html: Path, out_png: Path, tmp: Path) -> tuple[str, str]:
    """Open `html` in headless Chromium: the rendered DOM and stderr (screenshot written to `out_png`)."""
    import shutil
    import subprocess

    exe = shutil.which("chromium")
    assert exe, "chromium is not installed (Debian package 'chromium')"
    common = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--enable-logging=stderr", "--v=0"]
    url = html.resolve().as_uri()
    dom = subprocess.run([*common, f"--user-data-dir={tmp / 'profile-dom'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    shot = subprocess.run([*common, f"--user-data-dir={tmp / 'profile-shot'}", f"--screenshot={out_png}",
                           "--window-size=1280,4000", url], capture_output=True, text=True, timeout=120)
    return dom.stdout, dom.stderr + shot.stderr


def load_json(path: Path) -> object:
    return json.loads(path.read_text())
