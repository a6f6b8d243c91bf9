"""Server-side evidence -> advice, only where the evidence supports it."""

from __future__ import annotations

from servetune.engine.applied import AppliedMismatch
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.registry import profile_for
from servetune.report.advice import advise_config
from servetune.server_evidence import Evidence

BASE = Config.of({"gpu-memory-utilization": 0.45})
MORE_MEMORY = Config.of({"gpu-memory-utilization": 0.55})


def _topics(advice):
    return [a.topic for a in advice]


def test_evidence_reads_scraper_keys() -> None:
    ev = Evidence.of({"preemptions": 2.0, "peak_kv_cache_usage": 0.95, "prefix_cache_queries": 200.0,
                      "prefix_cache_hits": 50.0, "peak_waiting": 3.0, "peak_running": 16.0})
    assert (ev.preemptions, ev.kv_usage_peak, ev.prefix_hit_rate, ev.waiting_peak, ev.running_peak) == \
        (2.0, 0.95, 0.25, 3.0, 16.0)
    assert ev.pool_tight and not Evidence.of({}).pool_tight and Evidence.of({}).empty


def test_tight_pool_advises_more_memory() -> None:
    ev = {"contention": Evidence.of({"preemptions": 5.0, "peak_kv_cache_usage": 0.99})}
    advice = advise_config("baseline", BASE, None, ev, None)
    assert "gpu-memory-utilization" in _topics(advice)
    assert "raising --gpu-memory-utilization" in advice[0].text and "contention" in advice[0].text


def test_raising_memory_without_pressure_is_called_useless() -> None:
    ev = {"chat": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.2, "prefix_cache_queries": 10.0,
                               "prefix_cache_hits": 5.0})}
    advice = advise_config("gmu=0.55", MORE_MEMORY, BASE, ev, None)
    assert len(advice) == 1 and "only helps when preemptions > 0" in advice[0].text


def test_no_evidence_no_advice() -> None:
    assert advise_config("x", MORE_MEMORY, BASE, {"chat": Evidence.of({})}, None) == []


def test_zero_prefix_hits_and_mismatch() -> None:
    ev = {"a": Evidence.of({"prefix_cache_queries": 100.0, "prefix_cache_hits": 0.0})}
    mism = [AppliedMismatch(flag="mamba-cache-mode", requested="none", applied="align", evidence_line=None,
                            reason="set by the model")]
    advice = advise_config("x", Config.of({"enable-prefix-caching": True}), None, ev,
                           BootFacts(default_moe_config=True), mism)
    assert _topics(advice) == ["prefix-caching", "moe-config", "applied-check"]
    assert "--mamba-cache-mode: requested 'none', applied 'align' (set by the model)" in advice[-1].text


def test_queueing_points_at_max_num_seqs_only_when_the_batch_sat_at_the_limit() -> None:
    queued_at_limit = {"contention": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.1,
                                                  "peak_waiting": 6.0, "peak_running": 16.0})}
    limited = Config.of({"max-num-seqs": 16})
    advice = advise_config("mns=16", limited, None, queued_at_limit, None)
    assert "max-num-seqs" in _topics(advice) and "--max-num-seqs 16" in advice[-1].text
    # the same queue with a limit far above the batch: a request waiting one step is normal
    assert "max-num-seqs" not in _topics(advise_config("mns=64", Config.of({"max-num-seqs": 64}), None,
                                                       queued_at_limit, None))
    assert "max-num-seqs" not in _topics(advise_config("default", Config(), None, queued_at_limit, None))


def test_tight_pool_advice_never_offers_a_shorter_max_model_len_as_a_fix() -> None:
    # Field report 001: --max-model-len caps one request; the KV pool stays the same size.
    ev = {"contention": Evidence.of({"preemptions": 5.0, "peak_kv_cache_usage": 0.99})}
    text = advise_config("baseline", BASE, None, ev, None)[0].text
    assert "lowering --max-num-seqs" in text
    assert "lowering --max-model-len does not" in text and "/ --max-model-len" not in text


def test_prefix_cache_advice_claims_no_cost_for_the_hybrid_cache_mode() -> None:
    # Two field reports measured mamba 'align' (set with prefix caching) as a gain; one guessed a cost.
    ev = {"a": Evidence.of({"prefix_cache_queries": 100.0, "prefix_cache_hits": 0.0})}
    advice = advise_config("x", Config.of({"enable-prefix-caching": True}), None, ev, None)
    assert len(advice) == 1
    assert "cost" not in advice[0].text and "5-10" not in advice[0].text
    assert "measure --no-enable-prefix-caching" in advice[0].text


def test_every_advice_line_names_the_measurement_it_rests_on() -> None:
    ev = {"chat": Evidence.of({"preemptions": 3.0, "peak_kv_cache_usage": 0.97, "prefix_cache_queries": 50.0,
                               "prefix_cache_hits": 0.0, "peak_waiting": 2.0, "peak_running": 8.0})}
    mism = [AppliedMismatch(flag="mamba-cache-mode", requested="none", applied="align",
                            evidence_line="non-default args: {'mamba_cache_mode': 'align'}", reason="set by the model")]
    advice = advise_config("x", Config.of({"enable-prefix-caching": True, "enforce-eager": True}), None, ev,
                           BootFacts(default_moe_config=True), mism)
    basis = {a.topic: a.basis for a in advice}
    assert set(basis) == {"gpu-memory-utilization", "prefix-caching", "moe-config", "cuda-graphs", "applied-check"}
    assert basis["gpu-memory-utilization"] == "/metrics of chat: preemptions 3, peak KV usage 97%"
    assert basis["prefix-caching"] == "/metrics prefix-cache hit rate chat 0%"
    assert "Using default MoE config" in basis["moe-config"]
    assert "mamba_cache_mode" in basis["applied-check"]
    assert "not this study's" in basis["cuda-graphs"]
    roomy = {"chat": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.2})}
    [useless] = advise_config("gmu=0.55", MORE_MEMORY, BASE, roomy, None)
    assert useless.basis == "/metrics of chat: preemptions 0, peak KV usage 20%"
    queued = {"c": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.1, "peak_waiting": 6.0,
                                "peak_running": 16.0})}
    [seqs] = advise_config("mns=16", Config.of({"max-num-seqs": 16}), None, queued, None)
    assert seqs.basis == "/metrics c: peak waiting 6, peak running 16, peak KV usage 10%"


def test_advice_names_the_flags_of_the_engine_that_ran_the_config() -> None:
    tight = {"contention": Evidence.of({"preemptions": 5.0, "peak_kv_cache_usage": 0.99})}
    sglang = profile_for("sglang")
    (advice,) = advise_config("baseline", Config(), None, tight, None, profile=sglang)
    assert advice.topic == "mem-fraction-static"
    assert ("raising --mem-fraction-static (or lowering --max-running-requests)" in advice.text
            and "lowering --context-length does not" in advice.text and "gpu-memory-utilization" not in advice.text)
    queued = {"contention": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.1,
                                         "peak_waiting": 6.0, "peak_running": 16.0})}
    limited = Config.of({"max-running-requests": 16})
    assert "--max-running-requests 16" in advise_config("mrr=16", limited, None, queued, None, profile=sglang)[-1].text
    more = advise_config("mfs=0.9", Config.of({"mem-fraction-static": 0.9}), Config(),
                         {"chat": Evidence.of({"preemptions": 0.0, "peak_kv_cache_usage": 0.2})}, None, profile=sglang)
    assert [a.topic for a in more] == ["mem-fraction-static"] and "--mem-fraction-static" in more[0].text
