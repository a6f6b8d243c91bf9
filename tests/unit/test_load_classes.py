"""Traffic classes inside one run (load/classes.py): a mixed scenario's parts, each request tagged
with its class in its record, each class's metrics apart; against the FAKE server of one slot, a
long class raises the short class's TTFT, measured apart within the same run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from servetune.analysis import slo_proof
from servetune.analysis.class_proof import class_results
from servetune.analysis.types import SloState
from servetune.load.bench import run_scenario
from servetune.load.classes import class_counts, class_names, class_order
from servetune.load.dataset import request_specs
from servetune.load.options import RunOptions
from servetune.load.records import read_records
from servetune.load.scenario import Scenario, TrafficClass
from tests.fakes.launch import fake_server


def _mixed(**fields: object) -> Scenario:
    return Scenario.model_validate({"name": "mixed", "concurrency": 4, "num_prompts": 20, **fields})


def test_shares_are_exact_counts_by_largest_remainder() -> None:
    classes = {"a": TrafficClass(share=0.75), "b": TrafficClass(share=0.25)}
    assert class_counts(classes, 20) == {"a": 15, "b": 5}
    # 10 at weights 1:1:1 is 3.33 each: the remainders tie and the first class gets the extra one
    three = {n: TrafficClass(share=1) for n in "xyz"}
    assert class_counts(three, 10) == {"x": 4, "y": 3, "z": 3}
    assert sum(class_counts(three, 7).values()) == 7


def test_rates_are_parts_of_one_open_loop_at_their_sum() -> None:
    sc = _mixed(concurrency=None, classes={"chat": {"rate": 3.0}, "docs": {"rate": 1.0}})
    assert sc.rate == 4.0 and sc.concurrency is None
    assert class_counts(sc.classes or {}, 20) == {"chat": 15, "docs": 5}
    # a concurrency given caps it; a rate given must be the sum (a study's stored spec reads back)
    assert _mixed(concurrency=8, classes={"a": {"rate": 1}, "b": {"rate": 2}}).concurrency == 8
    again = Scenario.model_validate(sc.model_dump())
    assert again.rate == 4.0 and again.concurrency is None


def test_each_request_gets_its_class_and_the_class_lengths() -> None:
    sc = _mixed(classes={"chat": {"input_len": 16, "output_len": 2, "share": 3},
                         "docs": {"input_len": {"kind": "uniform", "low": 500, "high": 600}, "output_len": 40,
                                  "share": 1}})
    specs = request_specs(sc, 20, np.random.default_rng(0))
    assert sorted(s.traffic_class or "" for s in specs) == ["chat"] * 15 + ["docs"] * 5
    assert all((s.input_len, s.output_len) == (16, 2) for s in specs if s.traffic_class == "chat")
    assert all(500 <= (s.input_len or 0) <= 600 and s.output_len == 40 for s in specs if s.traffic_class == "docs")
    # shuffled by the seed: the long class is not all at the end, and the same seed gives the same order
    order = class_order(sc, 20, np.random.default_rng(0))
    assert order != sorted(order) and order == class_order(sc, 20, np.random.default_rng(0))


@pytest.mark.parametrize(("fields", "message"), [
    ({"classes": {"a": {"share": 1}}}, "needs two or more classes"),
    ({"classes": {"a": {"share": 1}, "b": {"rate": 2}}}, "every class a share or every class a rate"),
    ({"classes": {"a": {"share": 1, "rate": 1}, "b": {"share": 1}}}, "give share .* or rate .*, not both"),
    ({"classes": {"a": {"input_len": 16}, "b": {"share": 1}}}, "not both or neither"),
    ({"classes": {"a": {"share": 0}, "b": {"share": 1}}}, "greater than 0"),
    ({"classes": {"a": {"share": 1, "input_len": 0}, "b": {"share": 1}}}, "a.input_len: must be at least 1 token"),
    ({"classes": {"a b": {"share": 1}, "b": {"share": 1}}}, "class name 'a b'"),
    ({"classes": {"a": {"share": 1, "lenght": 3}, "b": {"share": 1}}}, "Extra inputs are not permitted"),
    ({"rate": 5, "classes": {"a": {"rate": 1}, "b": {"rate": 2}}}, r"rate \(5\) differs from the sum .* \(3\)"),
    ({"dataset": "x.jsonl", "classes": {"a": {"share": 1}, "b": {"share": 1}}}, "drop dataset"),
])
def test_a_bad_mixed_scenario_is_refused_naming_what_is_wrong(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _mixed(**fields)


# The fake holds its one slot from a request's first token to its last, 5 ms a token: a document
# of 60 tokens holds it 300 ms, a chat answer of 2 tokens 10 ms.
CHAT = {"input_len": 16, "output_len": 2}
DOCUMENTS = {"input_len": 64, "output_len": 60}


def test_a_long_class_raises_the_short_class_ttft_within_one_run(tmp_path: Path) -> None:
    mixed = _mixed(num_prompts=48, warmups=0, classes={"chat": {**CHAT, "share": 3}, "documents": {
        **DOCUMENTS, "share": 1}})
    alone = Scenario(name="alone", **CHAT, concurrency=4, num_prompts=36, warmups=0)  # type: ignore[arg-type]
    with fake_server(ttft_ms=5, itl_ms=5, slots=1, log=False) as url:
        both = run_scenario(url, None, mixed, RunOptions(out_dir=tmp_path, run_id="mixed"))
        solo = run_scenario(url, None, alone, RunOptions(out_dir=tmp_path, run_id="alone"))
    assert both.records_path and solo.records_path
    # the run's summary has each class apart, under vllm bench serve's names
    per_class = both.summary["classes"]
    assert {k: (v["completed"], v["total_output_tokens"]) for k, v in per_class.items()} == {
        "chat": (36, 72), "documents": (12, 720)}
    # each record keeps its class (what a resumed study judges from)
    records = read_records(Path(both.records_path))
    assert [r.traffic_class for r in records].count("documents") == 12
    chat, documents = class_results("mixed", ["chat", "documents"], {"chat": {"p90_ttft_ms": 100.0}},
                                     [Path(both.records_path)], alpha=0.05)
    chat_alone, = slo_proof.check_scenario("alone", {"p90_ttft_ms": 100.0}, [Path(solo.records_path)], {},
                                           alpha=0.05)
    # chat alone waits behind at most three 10 ms answers and meets 100 ms; beside documents its
    # p90 waits behind a 300 ms one: the same class, the same run's other class to blame
    assert chat_alone.state is SloState.met, chat_alone
    check, = chat.slo_checks
    assert check.scenario == "mixed/chat" and check.state is SloState.violated, check
    assert chat.stats["p50_ttft_ms"].n == 36 and documents.stats["p50_ttft_ms"].n == 12
    assert chat.stats["p99_ttft_ms"].estimate > chat_alone.high
    assert documents.slo_checks == [] and documents.slo_state is None and chat.slo_state is SloState.violated


# --- a trace's request types -----------------------------------------------------------------

def _burstgpt(path: Path, n: int = 40) -> Path:
    """A BurstGPT file: conversations of 16 prompt and 2 answer tokens, every fourth request an
    API call answering 60 tokens, 50 ms apart."""
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for i in range(n):
        api = i % 4 == 3
        rows.append(f"{i * 0.05:.2f},ChatGPT,{64 if api else 16},{60 if api else 2},0,"
                    f"{'API log' if api else 'Conversation log'}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_trace_replay_keeps_its_request_types_as_classes(tmp_path: Path) -> None:
    trace = _burstgpt(tmp_path / "burst.csv")
    sc = Scenario.model_validate({"name": "burst", "concurrency": 4, "warmups": 0, "trace": {"path": str(trace)}})
    assert class_names(sc) == ["conversation", "api"]
    with fake_server(ttft_ms=5, itl_ms=5, slots=1, log=False) as url:
        result = run_scenario(url, None, sc, RunOptions(out_dir=tmp_path, run_id="burst"))
    assert result.records_path
    assert {k: v["completed"] for k, v in result.summary["classes"].items()} == {"conversation": 30, "api": 10}
    # the run's records replay with their classes in turn (servetune's own trace format)
    again = Scenario.model_validate({"name": "again", "trace": {"path": result.records_path}})
    assert class_names(again) == ["conversation", "api"]
    assert sorted(r.traffic_class or "" for r in read_records(Path(result.records_path))).count("api") == 10


def test_a_scenario_without_classes_or_types_has_none(tmp_path: Path) -> None:
    assert class_names(Scenario(name="plain")) == []
    plain = tmp_path / "plain.csv"
    plain.write_text("Timestamp,Request tokens,Response tokens\n0,16,2\n1,16,2\n")
    assert class_names(Scenario.model_validate({"name": "p", "trace": {"path": str(plain)}})) == []
