"""The requests a trace Run replays (window, sample, speed-up, sessions, scaled lengths), the
prefix-cache hit rate they imply, and prompts that share exactly the trace's prefix blocks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from servetune.capacity.http import at_level
from servetune.capacity.search import settings_for
from servetune.errors import ServetuneError
from servetune.load import arrivals
from servetune.load.dataset import trace_specs
from servetune.load.prompts import LocalTokenizer, PromptFactory
from servetune.load.scenario import Scenario
from servetune.load.trace.prefix import implied_hits, per_request_hits
from servetune.load.trace.rows import TraceError, TraceRow
from servetune.load.trace.spec import TraceSpec
from servetune.load.trace.synth import TracePrompts
from servetune.load.trace.window import ReplayRequest, select

REPO = Path(__file__).resolve().parents[2]
MOONCAKE = REPO / "tests" / "fixtures" / "traces" / "mooncake-excerpt.jsonl"


def _rows(*times: float, session: str | None = None) -> list[TraceRow]:
    return [TraceRow(t, 100 + i, 10, session=session) for i, t in enumerate(times)]


def test_a_window_is_rebased_to_its_start_and_the_speedup_divides_its_times() -> None:
    spec = TraceSpec(path=Path("x"), start_s=10, duration_s=5)
    replay = select(_rows(100, 105, 110, 112.5, 114.999, 115, 130), spec, "x")
    assert [r.offset_s for r in replay.requests] == pytest.approx([0.0, 2.5, 4.999])
    assert replay.rows_read == 7 and replay.span_s == 5
    plan = arrivals.trace_plan([r.offset_s for r in replay.requests], 2.0, None)
    assert plan.offsets is not None and plan.offsets.tolist() == pytest.approx([0.0, 1.25, 2.4995])


def test_an_empty_window_names_the_file() -> None:
    with pytest.raises(TraceError, match=r"^t.jsonl: no request in the window \(start_s 50"):
        select(_rows(0, 1), TraceSpec(path=Path("t.jsonl"), start_s=50, duration_s=10), "t.jsonl")


def test_a_sample_keeps_whole_sessions_and_the_same_ones_each_time() -> None:
    rows = [TraceRow(float(i), 10, 2, session=f"s{i % 40}") for i in range(400)]
    spec = TraceSpec(path=Path("x"), sample=0.5, seed=3)
    kept = select(rows, spec, "x").requests
    assert 100 < len(kept) < 300 and len(kept) % 10 == 0  # each of the 40 sessions has 10 turns: all or none
    assert kept == select(rows, spec, "x").requests


def test_session_turns_follow_their_previous_turn_with_its_think_time() -> None:
    rows = [TraceRow(0.0, 10, 2, session="a"), TraceRow(1.0, 10, 2), TraceRow(2.0, 30, 2, session="a", delay_s=0.5)]
    replay = select(rows, TraceSpec(path=Path("x")), "x").requests
    assert [r.follows for r in replay] == [None, None, 0] and replay[2].delay_s == 0.5


def test_token_scale_shrinks_lengths_and_blocks_alike_and_must_give_whole_blocks() -> None:
    spec = TraceSpec(path=MOONCAKE, token_scale=1 / 16, max_requests=3)
    specs = trace_specs(Scenario(name="t", trace=spec))
    assert spec.block_tokens == 32 and [s.input_len for s in specs] == [round(6758 / 16), round(7322 / 16), 452]
    with pytest.raises(ValidationError, match="block_size x token_scale must be a whole number"):
        TraceSpec(path=MOONCAKE, token_scale=0.3)


def test_a_trace_scenario_sends_its_window_uncapped_unless_told() -> None:
    sc = Scenario(name="t", trace=TraceSpec(path=MOONCAKE, duration_s=20))
    assert sc.num_prompts is None and sc.concurrency is None and len(trace_specs(sc)) == 65
    capped = Scenario(name="t", num_prompts=5, concurrency=4, trace=TraceSpec(path=MOONCAKE))
    assert len(trace_specs(capped)) == 5 and capped.concurrency == 4
    with pytest.raises(ValidationError, match="trace sets the requests and their times: drop rate"):
        Scenario(name="t", rate=2.0, trace=TraceSpec(path=MOONCAKE))


def test_implied_hits_count_cached_leading_blocks_as_vllm_does() -> None:
    reqs = [ReplayRequest(0.0, 40, 1, (1, 2, 3)),        # 16+16+8: all new
            ReplayRequest(1.0, 40, 1, (1, 2, 4)),        # blocks 1, 2 cached: 32 tokens
            ReplayRequest(2.0, 32, 1, (1, 2)),           # all cached, but at most 31 -> one 16-block
            ReplayRequest(3.0, 40, 1, (5, 2, 3)),        # block 2 under another parent: nothing
            ReplayRequest(4.0, 48, 1, (1, 2, 3))]        # block 3 cached with 8 of its 16 tokens: 32 + 8
    assert per_request_hits(reqs, 16, 16) == [0, 32, 16, 0, 32]   # 40 floored to the 16-token KV block
    assert per_request_hits(reqs, 16, 8) == [0, 32, 24, 0, 40]
    total = implied_hits(reqs, 16, 16)
    assert (total.hits, total.queries) == (80, 200) and total.rate == 0.4


def test_prompts_share_exactly_the_blocks_their_hash_ids_share() -> None:
    tok = LocalTokenizer(REPO / "models" / "tiny")
    blocks = TracePrompts(PromptFactory(tok, seed=0, salt=7), salt=11, block_tokens=16)

    async def encoded(target: int, hash_ids: tuple[int, ...] | None) -> list[int]:
        prompt = await blocks.make(target, hash_ids)
        assert prompt.exact and prompt.tokens == target
        return await tok.encode(prompt.text)

    async def main() -> list[list[int]]:
        return [await encoded(40, (1, 2, 3)), await encoded(45, (1, 2, 4)), await encoded(40, (1, 2, 3)),
                await encoded(40, (9, 2, 3)), await encoded(40, None)]

    a, b, again, other_root, plain = asyncio.run(main())
    assert a[:32] == b[:32] and a[32] != b[32]          # two blocks shared, the third not
    assert a[:40] == again[:40]                          # the same ids: the same tokens (the tail too)
    assert a[0] != other_root[0] and a[:16] != plain[:16]
    salted = TracePrompts(PromptFactory(tok, seed=0, salt=7), salt=12, block_tokens=16)
    assert salted.block(1) != blocks.block(1)            # another run shares nothing with this one


def test_a_speedup_level_of_capacity_replays_the_same_window_faster() -> None:
    sc = Scenario(name="t", trace=TraceSpec(path=MOONCAKE, duration_s=20))
    fast = at_level(sc, "speedup", 3.5, num_prompts=500, run=1)
    assert fast.trace is not None and fast.trace.speedup == 3.5 and fast.trace.duration_s == 20
    assert trace_specs(fast) == trace_specs(sc) and fast.num_prompts is None
    settings = settings_for("speedup", start=None, max_level=None, alpha=0.05, rel_tol=0.1, max_levels=8,
                            max_runs_per_level=1)
    assert not settings.integer and settings.start == 1.0 and settings.max_level == 100.0


def test_a_dumped_and_revalidated_trace_scenario_still_reads_its_study_files_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative `trace.path` is read from the study file's folder; a scenario copied the way
    capacity's probe copies it (`model_dump()`, fields changed, `Scenario.model_validate`) keeps
    that folder, while the stored (JSON) spec keeps the path as written."""
    from servetune.load.trace.window import load_replay
    from servetune.study.loader import load_study, parse_study

    study_dir = tmp_path / "studies"
    (study_dir / "traces").mkdir(parents=True)
    (study_dir / "traces" / "window.jsonl").write_bytes(MOONCAKE.read_bytes())
    (study_dir / "s.yaml").write_text(
        "name: s\nengine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m}\n"
        "scenarios:\n  - {name: t, trace: {path: traces/window.jsonl, duration_s: 15}}\n")
    monkeypatch.chdir(tmp_path)   # not the study's folder: `traces/window.jsonl` is not here
    spec = load_study(study_dir / "s.yaml")
    fields = spec.scenarios[0].model_dump()
    fields.update(concurrency=8, num_prompts=1000, duration_s=None)   # as capacity/probe.py's http_probe
    copied = Scenario.model_validate(fields)
    assert copied.trace is not None and copied.trace.file == study_dir / "traces" / "window.jsonl"
    assert len(load_replay(copied.trace).requests) == len(load_replay(spec.scenarios[0].trace).requests) > 0
    stored = spec.model_dump(mode="json")["scenarios"][0]["trace"]
    assert stored == copied.model_dump(mode="json")["trace"] and stored["path"] == "traces/window.jsonl"
    # Only a dump carries the folder: a study file cannot set it.
    with pytest.raises(ServetuneError, match=r"trace\._base_dir: unknown key '_base_dir'"):
        parse_study("name: s\nengine: {model: m}\nscenarios:\n"
                    "  - {name: t, trace: {path: traces/window.jsonl, _base_dir: /tmp}}\n")
