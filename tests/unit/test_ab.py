"""`servetune ab`: the two sides' files, the alternating boots and their resume, the verdicts of
the two-level model with Holm, and the cold/warm prefix-reuse pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servetune.ab import prefix_reuse
from servetune.ab.analysis import AbAnalysis, BootSummary, analyze
from servetune.ab.render import markdown
from servetune.ab.runner import AbRunner, boot_order
from servetune.ab.spec import load_ab
from servetune.engine.defaults import EngineDefaults
from servetune.engine.vllm import VllmEngine
from servetune.errors import ServetuneError
from servetune.load.records import RequestRecord, RunResult
from servetune.store import StudyStore, TrialRole
from servetune.tune.display import StudyDisplay
from servetune.vocabulary import Outcome
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.standin import STANDIN, TINY_SCENARIO
from tests.unit.cli_run import servetune

WORKLOAD = {"scenarios": [TINY_SCENARIO], "replicates": 2}


def _study(command: list[str], **engine: object) -> dict:
    return {"name": "ab-unit", "engine": {"command": command, "model": str(MODEL_WITHOUT_WEIGHTS),
                                          "startup_timeout_s": 20, **engine}, **WORKLOAD}


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=1) + "\n")  # JSON is YAML: one key a line, so lines are known
    return path


def test_boots_alternate_a_and_b() -> None:
    assert boot_order(3) == ["A", "B", "A", "B", "A", "B"]


def test_two_files_must_measure_the_same_workload(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.yaml", _study(["python", str(STANDIN)]))
    other = _study(["python", str(STANDIN)])
    other["replicates"] = 3
    b = _write(tmp_path / "b.yaml", other)
    with pytest.raises(ServetuneError) as err:
        load_ab([a, b])
    line = next(i for i, text in enumerate(b.read_text().splitlines(), 1) if '"replicates"' in text)
    assert str(err.value).startswith(f"{b}:{line}: replicates: differs from {a}'s")


def test_one_file_gives_each_side_its_engine_keys(tmp_path: Path) -> None:
    doc = _study(["python", str(STANDIN)], args={"max-num-seqs": 4})
    doc["ab"] = {"A": {}, "B": {"command": ["/opt/other/python", "-m", "vllm.entrypoints.openai.api_server"]}}
    spec = load_ab([_write(tmp_path / "ab.yaml", doc)])
    assert spec.a.engine.command == ["python", str(STANDIN)]
    assert spec.b.engine.command == ["/opt/other/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert spec.a.engine.args == spec.b.engine.args == {"max-num-seqs": 4}  # the rest of engine is shared


def test_one_file_needs_both_sides(tmp_path: Path) -> None:
    doc = _study(["python", str(STANDIN)])
    doc["ab"] = {"A": {}}
    path = _write(tmp_path / "ab.yaml", doc)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if '"ab"' in text)
    with pytest.raises(ServetuneError, match=rf"^{path}:{line}: ab: expected"):
        load_ab([path])


def _stored_ab(tmp_path: Path, b_scale: float, *, boots: int = 3, reps: int = 3) -> tuple[StudyStore, object]:
    """A/B store with known values: boot luck of 3 %, replicate noise of 1 %, B's throughput
    b_scale times A's and its TPOT 1 / b_scale times."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    a = _write(tmp_path / "a.yaml", _study(["python", str(STANDIN)]))
    b = _write(tmp_path / "b.yaml", _study(["python", str(STANDIN)]))
    spec = load_ab([a, b])
    store = StudyStore.in_dir(tmp_path / "out")
    rng = np.random.default_rng(7)
    for side in boot_order(boots):
        trial = store.begin_trial(TrialRole(f"ab_{side.lower()}"), spec.side(side).baseline_config(), {"side": side})
        scale = b_scale if side == "B" else 1.0
        luck = np.exp(0.03 * rng.standard_normal())
        for rep in range(1, reps + 1):
            noise = np.exp(0.01 * rng.standard_normal())
            store.record_run(trial.id, rep, RunResult(scenario="tiny", summary={
                "output_throughput": 100 * scale * luck * noise, "mean_ttft_ms": 20 * luck * noise,
                "mean_tpot_ms": 5 / scale * luck * noise}), started_at=0, ended_at=1)
        store.finish_trial(trial.id, Outcome.ok)
    return store, spec


def test_a_slower_b_is_worse_and_an_equal_b_is_not(tmp_path: Path) -> None:
    store, spec = _stored_ab(tmp_path / "slow", 0.7)
    rows = {r.metric: r for r in analyze(store, spec).rows}
    assert rows["output_throughput"].verdict == "worse"
    assert rows["output_throughput"].comparison.ci_high_pct < 0
    assert rows["mean_tpot_ms"].verdict == "worse"  # a longer TPOT is worse: the direction is the metric's
    assert rows["mean_ttft_ms"].verdict == "no_difference"
    # 3 % boot sd, 1 % replicate sd, 3 replicates: a 10 % change needs about 3 boots a side, not hundreds
    assert 1 <= rows["output_throughput"].boots_for_target <= 10
    for row in rows.values():
        assert row.adjusted_p >= row.comparison.p_value  # Holm over the table
        assert row.comparison.test == "two-level-t"  # boot-to-boot variance is in every comparison

    store, spec = _stored_ab(tmp_path / "same", 1.0)
    result = analyze(store, spec)
    assert [r.verdict for r in result.rows] == ["no_difference"] * 3
    assert result.headline.startswith("no significant difference between B and A on 3 comparison(s)")


def test_one_boot_a_side_is_at_most_promising(tmp_path: Path) -> None:
    store, spec = _stored_ab(tmp_path, 0.5, boots=1)
    rows = {r.metric: r for r in analyze(store, spec).rows}
    assert rows["output_throughput"].verdict in ("not_promising", "no_difference")
    assert rows["output_throughput"].comparison.test == "log-t(replicates)"


def _record(index: int, ttft_ms: float) -> RequestRecord:
    return RequestRecord(index=index, input_len=100, output_len=4, scheduled_ns=0, dispatch_ns=1_000_000,
                         first_token_ns=1_000_000 + int(ttft_ms * 1e6), end_ns=2 * 10**9)


def test_prefix_reuse_pairs_cold_with_warm() -> None:
    records = [_record(0, 40.0), _record(1, 10.0), _record(2, 80.0), _record(3, 10.0)]
    failed = _record(5, 5.0).model_copy(update={"error": "HTTP 500"})
    summary = prefix_reuse.pair_summary([*records, _record(4, 50.0), failed])  # pair 2 is broken: left out
    assert summary["completed_pairs"] == 2
    assert summary["cold_ttft_ms"] == [40.0, 80.0] and summary["warm_ttft_ms"] == [10.0, 10.0]
    assert summary["warm_over_cold"] == pytest.approx((0.25 * 0.125) ** 0.5)


def _ab_file(tmp_path: Path) -> Path:
    doc = _study(["python", str(STANDIN)])
    # B streams every chunk 20 ms late: a known regression of its TPOT
    doc["ab"] = {"A": {}, "B": {"args": {"fault": "slow-chunks", "fault-delay-ms": 20}}}
    return _write(tmp_path / "ab.yaml", doc)


def _runner(spec, out: Path, boots: int) -> AbRunner:
    return AbRunner(spec, out, boots=boots, reuse=prefix_reuse.prefix_reuse_scenario(64, 2),
                    metrics=["mean_tpot_ms"], display=StudyDisplay(enabled=False))


def test_ab_on_the_standin_alternates_resumes_and_finds_the_slower_side(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path)])
    out = tmp_path / "out"
    _runner(spec, out, boots=1).run()
    store = StudyStore.open_existing(out)
    # A tuner killed as it began the third boot: the trial is left running, its session gone.
    session = store.begin_session()
    store.begin_trial(TrialRole.ab_a, spec.a.baseline_config(), {"side": "A"}, session_id=session)
    store.end_session(session, "killed")

    result = _runner(spec, out, boots=2).run()  # resumed with one more boot a side
    trials = StudyStore.open_existing(out).trials()
    assert [t.role for t in trials] == ["ab_a", "ab_b", "ab_a", "ab_b"]
    assert all(t.outcome == "ok" for t in trials)
    runs = StudyStore.open_existing(out).runs()
    assert sorted((r.scenario, r.replicate) for r in runs if r.trial_id == trials[2].id) == [
        ("prefix-reuse", 1), ("prefix-reuse", 2), ("tiny", 1), ("tiny", 2)]
    rows = {(r.scenario, r.metric): r for r in result.rows}
    assert rows[("tiny", "mean_tpot_ms")].verdict == "worse"
    assert rows[("tiny", "mean_tpot_ms")].comparison.ci_low_pct > 100
    assert {r.side: r.ratio.n for r in result.reuse} == {"A": 8, "B": 8}  # 2 boots x 2 replicates x 2 pairs
    # the section's ratio is the table's: geometric means of warm/cold
    ratio = rows[("prefix-reuse", "warm_over_cold")].comparison
    reuse = {r.side: r.ratio for r in result.reuse}
    assert (reuse["A"].estimate, reuse["B"].estimate) == pytest.approx((ratio.baseline_mean, ratio.candidate_mean))
    text = markdown(result)
    assert "## Upgrade A/B" in text and "| tiny | mean_tpot_ms |" in text and "warm/cold TTFT" in text


def test_a_directory_of_another_ab_is_refused(tmp_path: Path) -> None:
    spec = load_ab([_ab_file(tmp_path)])
    out = tmp_path / "out"
    StudyStore.in_dir(out).set_meta_json("ab", {"A": {}, "B": {}, "prefix_reuse": None, "boots": 1})
    with pytest.raises(ServetuneError, match="holds a different A/B"):
        _runner(spec, out, boots=1)


def test_cli_refuses_an_unknown_metric_in_one_line(tmp_path: Path) -> None:
    done = servetune("ab", _ab_file(tmp_path), "--out", tmp_path / "out", "--metric", "mean_ttf_ms")
    assert done.code == 2
    assert done.error_lines == ["error: --metric mean_ttf_ms: unknown metric 'mean_ttf_ms' (did you mean "
                                "'mean_ttft_ms'?)"]
    assert not (tmp_path / "out").exists()


def test_one_file_error_in_a_side_names_that_sides_line(tmp_path: Path) -> None:
    doc = _study(["python", str(STANDIN)])
    doc["ab"] = {"A": {}, "B": {"startup_timeout_s": -5}}
    path = _write(tmp_path / "ab.yaml", doc)
    lines = path.read_text().splitlines()
    b_line = next(i for i, text in enumerate(lines, 1) if '"startup_timeout_s": -5' in text)
    shared_line = next(i for i, text in enumerate(lines, 1) if '"startup_timeout_s": 20' in text)
    assert b_line != shared_line
    with pytest.raises(ServetuneError, match=rf"^{path}:{b_line}: engine.startup_timeout_s"):
        load_ab([path])


def _last_line_of(path: Path, text: str) -> int:
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line][-1]


def test_a_side_whose_engine_is_missing_stops_the_ab_before_anything(tmp_path: Path) -> None:
    """Each side's engine command and model are checked as `tune` checks a study's: a located line
    per problem, exit 2, no boot and nothing stored, so the corrected file starts this directory."""
    doc = _study(["python", str(STANDIN)])
    doc["ab"] = {"A": {}, "B": {"command": ["servetune-test-no-such-engine"]}}
    path = _write(tmp_path / "ab.yaml", doc)
    out = tmp_path / "out"
    result = servetune("ab", path, "--out", out)
    assert result.code == 2 and "Traceback" not in result.stderr, result
    b_line = _last_line_of(path, '"command"')  # ab.B's, not the shared engine's
    assert result.error_lines == [f"error: {path}:{b_line}: engine.command: "
                                  "'servetune-test-no-such-engine' is not on PATH"]
    store = StudyStore.open_existing(out, read_only=True)
    assert (store.trials(), store.sessions(), store.get_meta_json("ab")) == ([], [], None)
    assert not (out / "logs").exists()  # no server started


def test_each_sides_file_names_its_own_problem(tmp_path: Path) -> None:
    a_doc = _study(["python", str(STANDIN)])
    a_doc["engine"]["model"] = str(tmp_path / "no-such-model")
    a = _write(tmp_path / "a.yaml", a_doc)
    b = _write(tmp_path / "b.yaml", _study([str(tmp_path / "no-such-python")]))
    with pytest.raises(ServetuneError) as err:
        _runner(load_ab([a, b]), tmp_path / "out", boots=1)
    a_line, b_line = _last_line_of(a, '"model"'), _last_line_of(b, '"command"')
    assert str(err.value).splitlines() == [
        f"{a}:{a_line}: engine.model: '{tmp_path / 'no-such-model'}' is not reachable: "
        f"no directory {tmp_path / 'no-such-model'}",
        f"{b}:{b_line}: engine.command: '{tmp_path / 'no-such-python'}' does not exist"]


def test_a_flag_a_sides_engine_does_not_take_stops_the_ab_at_that_sides_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each side's flags are checked against its engine's parser as `tune` checks a study's: one
    file's `ab.B.args` typo is located at B's line, a second file's at its own, exit 2, nothing stored."""
    parser = EngineDefaults(known=True, source="test parser", flags=["max-num-seqs", "max-model-len"])
    monkeypatch.setattr(VllmEngine, "read_defaults", lambda self: parser)
    doc = _study(["python", str(STANDIN)], args={"max-num-seqs": 4})
    doc["ab"] = {"A": {}, "B": {"args": {"max-num-seqz": 4}}}
    path = _write(tmp_path / "ab.yaml", doc)
    out = tmp_path / "out"
    result = servetune("ab", path, "--out", out)
    assert result.code == 2 and "Traceback" not in result.stderr, result
    b_line = _last_line_of(path, '"max-num-seqz"')
    assert result.error_lines == [f"error: {path}:{b_line}: engine.args.max-num-seqz: the installed engine has no "
                                  "flag --max-num-seqz (did you mean 'max-num-seqs'?) (test parser)"]
    store = StudyStore.open_existing(out, read_only=True)
    assert (store.trials(), store.sessions(), store.get_meta_json("ab")) == ([], [], None)
    assert not (out / "logs").exists()  # no server started

    a = _write(tmp_path / "a.yaml", _study(["python", str(STANDIN)], args={"max-model-lenn": 64}))
    b = _write(tmp_path / "b.yaml", _study(["python", str(STANDIN)], args={"max-model-len": 64}))
    with pytest.raises(ServetuneError) as err:
        _runner(load_ab([a, b]), tmp_path / "out2", boots=1)
    a_line = _last_line_of(a, '"max-model-lenn"')
    assert str(err.value).splitlines() == [
        f"{a}:{a_line}: engine.args.max-model-lenn: the installed engine has no "
        "flag --max-model-lenn (did you mean 'max-model-len'?) (test parser)"]


def test_the_markdown_names_each_sides_engine() -> None:
    boots = [BootSummary(1, "A", "ok", "0.11.0", 80.0, 2), BootSummary(2, "B", "ok", "0.5.15", 60.0, 2)]
    result = AbAnalysis(rows=[], reuse=[], boots=boots, commands={"A": "vllm serve", "B": "sglang"}, alpha=0.05,
                        min_effect_pct=1.0, versions={"A": ["0.11.0"], "B": ["0.5.15"]},
                        engines={"A": "vLLM", "B": "SGLang"})
    text = markdown(result)
    assert "- A: `vllm serve` (vLLM 0.11.0)" in text and "- B: `sglang` (SGLang 0.5.15)" in text
    assert "| # | side | vLLM / SGLang | outcome | boot s | runs |" in text
