"""The prefill sweep per size: TTFT and prefill tokens/s for each prompt size, and a size that
gets no first token within the per-size limit recorded as timed out while the sweep goes on
(against the fake server, whose prompts from a given size never get a first token)."""

from __future__ import annotations

from pathlib import Path

from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.load.scenario import preset
from servetune.load.sweep import TIMEOUT, per_size
from servetune.vocabulary import Outcome
from tests.fakes.launch import fake_server


def test_a_size_that_stalls_is_that_sizes_result_and_the_sweep_goes_on(tmp_path: Path) -> None:
    sc = preset("prefill-sweep", sweep_input_lens=[64, 128, 512, 256], sweep_timeout_s=1.0, output_len=4)
    with fake_server(ttft_ms=5, itl_ms=1, stall_prompts_from=400) as url:
        result = run_scenario(url, None, sc, RunOptions(out_dir=tmp_path, run_id="sweep"))
    assert result.outcome is Outcome.ok, result.error
    sizes = result.summary["prefill_sweep"]
    assert [s["input_len"] for s in sizes] == [64, 128, 512, 256]
    assert [s["outcome"] for s in sizes] == ["ok", "ok", TIMEOUT, "ok"]  # the size after the stall measured
    for s in (sizes[0], sizes[1], sizes[3]):
        assert s["ttft_ms"] > 0 and s["prefill_tok_s"] == s["prompt_tokens"] / (s["ttft_ms"] / 1e3)
    assert sizes[2]["ttft_ms"] is None and sizes[2]["prefill_tok_s"] is None
    assert result.summary["completed"] == 3


def test_a_stall_outside_a_sweep_still_ends_the_run(tmp_path: Path) -> None:
    sc = preset("prefill-heavy", input_len=512, output_len=4, num_prompts=2, concurrency=1, warmups=0,
                stall_timeout_s=1.0)
    with fake_server(ttft_ms=5, itl_ms=1, stall_prompts_from=400) as url:
        result = run_scenario(url, None, sc, RunOptions(out_dir=tmp_path, run_id="heavy"))
    assert result.outcome is Outcome.stalled


def test_the_preset_has_a_per_size_limit_that_bounds_the_run() -> None:
    sc = preset("prefill-sweep")
    assert sc.sweep_timeout_s is not None and sc.effective_stall_timeout_s == sc.sweep_timeout_s
    # every size may time out: the run's deadline leaves room for each to do so
    assert sc.effective_run_timeout_s >= (len(sc.sweep_input_lens or []) + 1) * sc.sweep_timeout_s


def test_per_size_reads_failures_apart_from_timeouts() -> None:
    from servetune.load.records import RequestRecord

    ok = RequestRecord(index=0, input_len=100, output_len=4, scheduled_ns=0, dispatch_ns=10**9,
                       first_token_ns=10**9 + 50 * 10**6, end_ns=2 * 10**9, prompt_tokens=100)
    stalled = RequestRecord(index=1, input_len=200, output_len=4, scheduled_ns=0, dispatch_ns=10**9,
                            end_ns=3 * 10**9, error="stalled: no data for 60 s (stall_timeout_s)")
    refused = RequestRecord(index=2, input_len=300, output_len=4, scheduled_ns=0, dispatch_ns=10**9,
                            end_ns=10**9, error="HTTP 400: too long")
    sizes = per_size([refused, stalled, ok])
    assert [s["outcome"] for s in sizes] == ["ok", "timeout", "failed"]
    assert sizes[0]["ttft_ms"] == 50 and sizes[0]["prefill_tok_s"] == 2000


def test_the_report_shows_each_size_of_each_boot(tmp_path: Path) -> None:
    from report_study import build_study

    from servetune.engine.config import Config
    from servetune.load.records import RunResult
    from servetune.report import write_report
    from servetune.store import TrialRole

    store, analysis = build_study(tmp_path)
    trial = store.begin_trial(TrialRole("candidate"), Config.of(flags={"max-num-seqs": 8}), {"max-num-seqs": 8})
    for rep, outcome in enumerate(["ok", TIMEOUT]):
        sizes = [{"input_len": 4096, "prompt_tokens": 4096, "ttft_ms": 1000.0 + rep, "prefill_tok_s": 4096.0,
                  "outcome": "ok", "error": None},
                 {"input_len": 20480, "prompt_tokens": None, "ttft_ms": None if outcome == TIMEOUT else 8000.0,
                  "prefill_tok_s": None if outcome == TIMEOUT else 2560.0, "outcome": outcome, "error": None}]
        store.record_run(trial.id, rep, RunResult(scenario="prefill-sweep", summary={"completed": 2,
                         "prefill_sweep": sizes}), started_at=0.0, ended_at=1.0)
    store.finish_trial(trial.id, Outcome.ok)
    paths = write_report(analysis, store, tmp_path / "report")
    text = Path(paths["markdown"]).read_text()
    assert "## Prefill sweep" in text
    assert "4096: 1,000 ms, 4,096 tok/s; 20480: 8,000 ms, 2,560 tok/s, timeout in 1/2" in text
    assert 'id="prefill-sweep"' in Path(paths["html"]).read_text()
