"""TrialExecutor around a boot: what it stores before the spawn and after the teardown."""

from __future__ import annotations

from pathlib import Path

from servetune.engine.base import StartResult
from servetune.engine.config import Config
from servetune.engine.launch import Server, StopReport
from servetune.store import StudyStore, TrialRole
from servetune.tune.trial import TrialExecutor, TrialPlan
from servetune.vocabulary import Outcome
from tests.fakes.launch import fake_server


class LeakyEngine:
    """Boots nothing: hands out the fake server and reports a teardown that left the port held."""

    def __init__(self, url: str, store: StudyStore):
        self.url = url
        self.store = store
        self.token_stored_before_start: str | None = None

    def start(self, config: Config, log_path: Path, port: int | None = None, on_spawn=None,
              launch_token: str | None = None, placement=None, cache=None) -> StartResult:
        self.token_stored_before_start = self.store.trial(1).launch_token
        assert self.token_stored_before_start == launch_token
        server = Server(url=self.url, port=int(self.url.rsplit(":", 1)[1]), pid=1, pgid=1, create_time=0.0,
                        log_path=log_path, started_at=0.0, launch_token=launch_token)
        return StartResult(outcome=Outcome.ok, server=server)

    def client_api_key(self, config: Config) -> str | None:
        return None

    def stop(self, server: Server) -> StopReport:
        return StopReport(left_pids=[4242], port_free=False, forced=True, port=server.port, port_holders=[4243])


def test_a_teardown_that_left_a_process_and_the_port_is_in_the_trial_detail(tmp_path: Path) -> None:
    store = StudyStore.in_dir(tmp_path)
    trial = store.begin_trial(TrialRole.baseline, Config(), {})
    with fake_server(ttft_ms=1, itl_ms=1) as url:
        engine = LeakyEngine(url, store)
        outcome = TrialExecutor(engine, store, tmp_path, None).run(
            trial, TrialPlan([], 1, 1), enough=lambda t, r: True, progress=lambda *a: None)
    done = store.trial(trial.id)
    port = url.rsplit(":", 1)[1]
    assert outcome == "ok" and done.outcome == "ok"  # the measurements stand
    assert done.detail == f"teardown left process(es) 4242 still running and port {port} still held by pid 4243"
    assert engine.token_stored_before_start  # the launch intent reached the store before the spawn


class TooLongEngine:
    """Fails every boot context_too_long, with vLLM's estimate or (an older message) without."""

    def __init__(self, estimate: int | None) -> None:
        self.estimate = estimate

    def start(self, config: Config, log_path: Path, port: int | None = None, on_spawn=None,
              launch_token: str | None = None, placement=None, cache=None) -> StartResult:
        return StartResult(outcome=Outcome.context_too_long, detail="max model length does not fit in the KV cache",
                           estimated_max_model_len=self.estimate)


def _too_long_trial(tmp_path: Path, estimate: int | None, baseline_memory: str) -> str | None:
    from servetune.analysis import known
    from servetune.engine.bootfacts import BootFacts

    store = StudyStore.in_dir(tmp_path)
    baseline = Config.of({"kv-cache-memory-bytes": baseline_memory, "max-model-len": 2048})
    first = store.begin_trial(TrialRole.baseline, baseline, {})
    facts = BootFacts(kv_cache_tokens=4096, max_concurrency=2.0, max_concurrency_tokens=2048)
    store.record_boot(first.id, healthy_at=1.0, boot_facts=facts, mismatches=[],
                      log_path="logs/x.log")
    store.finish_trial(first.id, Outcome.ok)
    trial = store.begin_trial(TrialRole.candidate, Config.of({"kv-cache-memory-bytes": "4MiB", "max-model-len": 8192}), {})
    outcome = TrialExecutor(TooLongEngine(estimate), store, tmp_path, None).run(
        trial, TrialPlan([], 1, 1), enough=lambda t, r: True, progress=lambda *a: None,
        fits_of=lambda t, est: known.context_fit(store, t, est, baseline))
    assert outcome == "context_too_long"
    return store.trial(trial.id).detail


def test_a_context_too_long_trial_says_what_would_fit_from_vllms_estimate(tmp_path: Path) -> None:
    detail = _too_long_trial(tmp_path, 3968, "4MiB")
    assert detail is not None and "fits: --max-model-len 3968 (vLLM's estimate" in detail


def test_without_an_estimate_the_kv_cache_of_a_config_with_the_same_memory_says(tmp_path: Path) -> None:
    detail = _too_long_trial(tmp_path, None, "4MiB")
    assert detail is not None and "fits: about --max-model-len 4096 (the KV cache of the baseline (#1)" in detail
    # another pool size says nothing about this one
    assert "fits:" not in (_too_long_trial(tmp_path / "other", None, "1GiB") or "")


def test_a_trace_run_of_a_trial_expects_the_hits_of_the_pool_its_boot_log_gave(tmp_path: Path) -> None:
    from servetune.engine.bootfacts import BootFacts
    from servetune.load.scenario import Scenario
    from servetune.load.trace.spec import TraceSpec
    from tests.fakes.counting_engine import CountingEngine

    repo = Path(__file__).resolve().parents[2]
    trace = TraceSpec(path=repo / "tests" / "fixtures" / "traces" / "mooncake-excerpt.jsonl", duration_s=15,
                      token_scale=1 / 16, speedup=4)
    store = StudyStore.in_dir(tmp_path)
    summaries = {}
    with fake_server(ttft_ms=1, itl_ms=1, prefix_cache_block=16) as url:
        for pool in (None, 1_000_000):
            trial = store.begin_trial(TrialRole.baseline, Config(), {})
            engine = CountingEngine(url, facts_for=lambda config, pool=pool: BootFacts(kv_cache_tokens=pool))
            outcome = TrialExecutor(engine, store, tmp_path, repo / "models" / "tiny").run(
                trial, TrialPlan([Scenario(name="t", warmups=0, trace=trace)], 1, 1),
                enough=lambda t, r: True, progress=lambda *a: None)
            assert outcome == "ok"
            summaries[pool] = store.runs(trial.id)[0].summary
    # The fake's cache keeps everything: a pool that holds the run expects the implied hits.
    big = summaries[1_000_000]
    assert big["prefix_hit_rate_pool"] == big["prefix_hit_rate_implied"] == big["prefix_hit_rate_measured"] > 0
    assert "prefix_hit_rate_pool" not in summaries[None]   # a boot log without the pool
