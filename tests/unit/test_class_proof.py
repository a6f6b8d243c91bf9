"""A mixed scenario's traffic classes in a study (analysis/class_proof.py): each class's SLOs judged on
its own requests, pooled over a config's boots from the stored records (so a resumed study judges
them again), counted for the winner, and shown per class with intervals in the report; the study
file's class SLOs checked with file, line and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servetune.analysis import analysis, slo_proof
from servetune.analysis.types import SloState
from servetune.errors import ServetuneError
from servetune.load.records import RequestRecord, RunResult
from servetune.report import write_report
from servetune.store import StudyStore, TrialRole
from servetune.study import load_study, parse_study
from servetune.vocabulary import Outcome

MS = 1_000_000

STUDY = """
name: mixed-unit
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8]}
scenarios:
  - name: mixed
    concurrency: 4
    num_prompts: 120
    classes:
      chat: {input_len: 16, output_len: 4, share: 3}
      documents: {input_len: 1500, output_len: 4, share: 1}
objective:
  maximize: output_throughput
  slo:
    mixed:
      p99_e2el_ms: 5000
      chat: {p90_ttft_ms: 300}
strategy: ofat
replicates: 3
"""


def _records(path: Path, ttfts: dict[str, list[float]]) -> Path:
    """A run's JSONL: the classes' requests interleaved, one a second, four tokens 10 ms apart."""
    order = [(name, t) for name, values in ttfts.items() for t in values]
    order = [order[i] for i in np.random.default_rng(len(order)).permutation(len(order))]
    lines = []
    for i, (name, ttft) in enumerate(order):
        start = i * 1000 * MS
        first = start + int(ttft * MS)
        chunks = [first + k * 10 * MS for k in range(4)]
        lines.append(RequestRecord(index=i, input_len=16, output_len=4, scheduled_ns=start, dispatch_ns=start,
                                   first_token_ns=first, chunk_ns=chunks, chunk_tokens=[1] * 4, end_ns=chunks[-1],
                                   output_tokens=4, traffic_class=name).model_dump_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def _trial(store: StudyStore, spec, rng: np.random.Generator, role: str, params: dict[str, int], mean: float,
           chat_ms: float) -> None:
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params)
    for rep in range(1, 4):
        ttfts = {"chat": [float(x) for x in chat_ms * (1 + 0.1 * rng.standard_normal(90))],
                 "documents": [float(x) for x in 400 * (1 + 0.1 * rng.standard_normal(30))]}
        records = _records(store.path.parent / f"t{trial.seq}r{rep}.jsonl", ttfts)
        summary = {"output_throughput": mean * (1 + 0.01 * rng.standard_normal()), "p99_e2el_ms": 500.0}
        store.record_run(trial.id, rep, RunResult(scenario="mixed", summary=summary, records_path=records.name),
                         started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)


def _study(tmp_path: Path, candidate_chat_ms: float):
    spec = parse_study(STUDY)
    store = StudyStore.in_dir(tmp_path)
    store.set_meta_json("spec", spec.model_dump(mode="json"))
    rng = np.random.default_rng(5)
    _trial(store, spec, rng, "baseline", {}, 100, 100.0)
    _trial(store, spec, rng, "candidate", {"max-num-seqs": 8}, 130, candidate_chat_ms)
    _trial(store, spec, rng, "baseline_final", {}, 100, 100.0)
    _trial(store, spec, rng, "finalist", {"max-num-seqs": 8}, 130, candidate_chat_ms)
    return spec, store


def test_a_faster_config_whose_chat_class_waits_behind_documents_is_not_the_winner(tmp_path: Path) -> None:
    # Pooled over both classes the candidate's TTFT would read fine at the scenario's level; its chat
    # requests alone, 90 a run, violate the class's p90 of 300 ms.
    spec, store = _study(tmp_path, candidate_chat_ms=600.0)
    result = analysis.analyze(store, spec)
    fast = next(c for c in result.configs if not c.is_baseline)
    assert fast.objective_effect is not None and fast.objective_effect.verdict == "better"
    chat = next(c for c in fast.slo_checks if c.scenario == "mixed/chat")
    assert chat.metric == "p90_ttft_ms" and chat.state is SloState.violated and chat.n == 540   # 90 x 3 x 2 boots
    assert chat.low > 300.0 and fast.slo_state is SloState.violated and not fast.feasible
    assert result.winner is None
    classes = {c.name: c for c in fast.scenarios["mixed"].classes}
    assert set(classes) == {"chat", "documents"} and classes["documents"].slo_state is None
    docs = classes["documents"].stats["p50_ttft_ms"]
    assert docs.n == 180 and docs.low <= docs.estimate <= docs.high and 350.0 < docs.estimate < 450.0
    assert result.baseline is not None and result.baseline.slo_state is SloState.met
    written = write_report(result, store, tmp_path / "report")
    md = written["markdown"].read_text()
    html = written["html"].read_text()
    assert "<h3>Traffic classes</h3>" in html and "<td>documents</td>" in html
    section = md.split("### Traffic classes", 1)[1].split("\n### ", 1)[0]
    chat_rows = [line for line in section.splitlines() if "| chat |" in line]
    assert len(chat_rows) == 2 and any("**violated**: mixed/chat: p90_ttft_ms" in r for r in chat_rows)
    assert any("| met |" in r for r in chat_rows)


def test_the_same_config_with_its_chat_class_inside_its_slo_wins(tmp_path: Path) -> None:
    spec, store = _study(tmp_path, candidate_chat_ms=120.0)
    result = analysis.analyze(store, spec)
    assert result.winner is not None and result.winner.slo_state is SloState.met
    assert any(c.scenario == "mixed/chat" and c.state is SloState.met for c in result.winner.slo_checks)


def test_class_slos_are_read_back_from_a_stored_spec() -> None:
    spec = parse_study(STUDY)
    again = type(spec).from_store(spec.model_dump(mode="json"))
    assert again.objective.class_slo_for("mixed") == {"chat": {"p90_ttft_ms": 300.0}}
    assert again.objective.slo_for("mixed") == {"p99_e2el_ms": 5000.0}


@pytest.mark.parametrize(("entry", "message"), [
    ("chatt: {p90_ttft_ms: 300}", r"study.yaml:\d+: objective.slo.mixed.chatt: scenario 'mixed' has no traffic class "
                                  r"'chatt' \(did you mean 'chat'\?\)"),
    ("chat: {output_throughput: 50}", r"objective.slo.mixed.chat.output_throughput: a class's SLO bounds a latency"),
    ("chat: {p90_ttft_ms: 0}", r"objective.slo.mixed.chat.p90_ttft_ms: an SLO limit must be a positive number"),
])
def test_a_bad_class_slo_is_refused_with_its_file_line_and_key(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("chat: {p90_ttft_ms: 300}", entry))
    with pytest.raises(ServetuneError, match=message):
        load_study(path)


def test_a_class_slo_on_a_scenario_without_classes_or_under_capacity_is_refused() -> None:
    plain = STUDY.replace("""    classes:
      chat: {input_len: 16, output_len: 4, share: 3}
      documents: {input_len: 1500, output_len: 4, share: 1}
""", "")
    with pytest.raises(ServetuneError, match="scenario 'mixed' has no traffic class 'chat' .it has no classes."):
        parse_study(plain)
    capacity = STUDY.replace("maximize: output_throughput", "maximize: capacity")
    with pytest.raises(ServetuneError, match="a traffic class's SLOs are judged on a study's runs"):
        parse_study(capacity)


def test_plan_names_a_class_percentile_its_share_of_the_requests_cannot_prove() -> None:
    # 120 requests a run, 90 of them chat: a boot of one replicate, two boots at most
    text = STUDY.replace("p90_ttft_ms: 300", "p99_ttft_ms: 300").replace(
        "replicates: 3", "replicates: 1\nrevalidation: {max_boots: 2}")
    lines = slo_proof.unprovable(parse_study(text))
    chat = [line for line in lines if line.startswith("mixed/chat: p99_ttft_ms")]
    assert len(chat) == 1 and "at most 180 here (90 a run x 1 replicate(s) x 2 boots)" in chat[0]


def test_a_class_slo_of_a_trace_scenario_names_one_of_its_request_types(tmp_path: Path) -> None:
    trace = tmp_path / "burst.csv"
    trace.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "0,ChatGPT,16,2,18,Conversation log\n0.5,GPT-4,64,8,72,API log\n")
    text = f"""
name: trace-classes
engine: {{model: m}}
scenarios:
  - name: burst
    trace: {{path: {trace}}}
objective:
  slo:
    burst:
      conversation: {{p50_ttft_ms: 300}}
      %s
"""
    spec = parse_study(text % "api: {p50_e2el_ms: 2000}")
    assert spec.objective.class_slo_for("burst") == {"conversation": {"p50_ttft_ms": 300.0},
                                                      "api": {"p50_e2el_ms": 2000.0}}
    with pytest.raises(ServetuneError, match=r"scenario 'burst' has no traffic class 'apis' \(did you mean 'api'\?\) "
                                             r"\(its classes: conversation, api\)"):
        parse_study(text % "apis: {p50_e2el_ms: 2000}")


def test_a_profiles_class_slo_is_checked_against_its_own_entries_and_named_under_the_profile() -> None:
    with_profile = STUDY + "profiles:\n  chatty:\n    minimize: mean_ttft_ms\n    slo: {mixed: {chatt: {p90_ttft_ms: 300}}}\n"
    with pytest.raises(ServetuneError, match=r"profiles.chatty.slo.mixed.chatt: scenario 'mixed' has no traffic class 'chatt'"):
        parse_study(with_profile)
    fine = STUDY + "profiles:\n  chatty:\n    minimize: mean_ttft_ms\n    slo: {mixed: {chat: {p90_ttft_ms: 300}}}\n"
    assert parse_study(fine).profiles["chatty"].class_slo_for("mixed") == {"chat": {"p90_ttft_ms": 300.0}}
