"""The search's stopping rule (search/stopping.py): it stops once no unbooted config is likely to
beat the leader by the minimum effect, not while a close or unmeasured one remains; a study it
stopped records why and a resume boots nothing more."""

from __future__ import annotations

import io
import math
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from servetune.analysis import known
from servetune.cli import app
from servetune.cli.tune_cmd import search_stop_line
from servetune.engine.bootfacts import BootFacts
from servetune.search import TrialView, stopping
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.counting_engine import CPU_DEFAULTS, CountingEngine
from tests.fakes.launch import fake_server


def spec_of(space: dict[str, Any], chance_below: float | None = 0.05, **extra: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "stopping",
        "engine": {"model": "models/tiny", "args": {"max-num-seqs": 4, "max-num-batched-tokens": 256}},
        "space": space,
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 8}],
        "strategy": "grid", "replicates": 2, "finalists": 0, "min_effect_pct": 1.0,
        "stopping": {"chance_below": chance_below}, **extra,
    })


SPACE = {"max-num-seqs": [4, 16], "max-num-batched-tokens": [256, 1024]}
# The grid studies below on fake servers: output throughput from the inter-token latency of each point.
GRID_ITL = {(4, 256): 6, (4, 1024): 2, (16, 1024): 6, (16, 256): 18}


def grid_spec(**extra: Any) -> StudySpec:
    return StudySpec.model_validate({
        "name": "stop-grid",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(MODEL_WITHOUT_WEIGHTS),
                   "args": {"max-num-seqs": 4, "max-num-batched-tokens": 256}},
        "space": SPACE,
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 16, "num_prompts": 2, "warmups": 0}],
        "strategy": "grid", "replicates": 2, "finalists": 0, "baseline_every": 5, **extra,
    })


def view(value: float, **params: int) -> TrialView:
    """A trial of `params` (names with dashes) whose three replicates lie within 1 % of `value`."""
    return TrialView(params={k.replace("_", "-"): v for k, v in params.items()},
                     samples=(value * 0.99, value, value * 1.01))


def test_it_stops_once_the_only_unbooted_config_is_predicted_well_below_the_leader() -> None:
    # More sequences triple the objective, the larger batch budget cuts it to a third: the config
    # left, both at once, is predicted at the baseline's level, far below the leader.
    history = [view(1.0), view(3.0, max_num_seqs=16), view(1 / 3, max_num_batched_tokens=1024)]
    state = stopping.assess(spec_of(SPACE), history)
    assert state.unbooted == 1 and state.leader == "max-num-seqs=16"
    assert state.best_unbooted == "max-num-batched-tokens=1024 max-num-seqs=16"
    assert state.chance is not None and state.chance < 0.05
    assert state.stops
    assert "→ stop" in state.line(1.0)


def test_it_does_not_stop_while_a_close_candidate_remains() -> None:
    # The batch budget does nothing: the config left combines the leader's sequences with it and
    # is predicted to tie with the leader; with replicates 1 % apart it may well beat it by 1 %.
    history = [view(1.0), view(3.0, max_num_seqs=16), view(1.0, max_num_batched_tokens=1024)]
    state = stopping.assess(spec_of(SPACE), history)
    assert state.chance is not None and 0.05 < state.chance < 0.5
    assert not state.stops


def test_a_value_no_trial_has_booted_keeps_the_search_going() -> None:
    # max-num-seqs 64 was never measured: its effect may be as large as the largest seen (tau, one
    # prior sd), so it beats a leader that owes its whole lead to max-num-seqs with about the
    # one-sd tail, 1 - Phi(1) = 16 %: above every threshold the study file accepts (at most 15 %).
    space = {"max-num-seqs": [4, 16, 64], "max-num-batched-tokens": [256, 1024]}
    history = [view(1.0), view(3.0, max_num_seqs=16), view(1 / 3, max_num_batched_tokens=1024),
               view(1.0, max_num_seqs=16, max_num_batched_tokens=1024)]
    state = stopping.assess(spec_of(space), history)
    assert state.best_unbooted == "max-num-seqs=64"
    assert state.chance is not None and 0.15 < state.chance < 0.16
    assert not state.stops


def test_the_chance_is_the_posterior_tail_above_the_leader_by_the_minimum_effect() -> None:
    """With the two effects measured exactly (replicates alike, no residual), the unbooted config's
    prediction is the sum of the effects with the posterior variance of a conjugate prior of sd
    tau = the largest effect: a known number, not just a direction."""
    history = [TrialView(params={}, samples=(1.0, 1.0)),
               TrialView(params={"max-num-seqs": 16}, samples=(2.0, 2.0)),
               TrialView(params={"max-num-batched-tokens": 1024}, samples=(0.5, 0.5))]
    state = stopping.assess(spec_of(SPACE), history)
    # noise is zero (floored at 1e-12): the posterior is the data; the prediction log 2 - log 2 = 0
    # against a bar of log 2 + log 1.01, with no variance left: a chance of zero.
    assert state.chance == pytest.approx(0.0, abs=1e-9)
    assert math.isclose(state.chance or 0.0, 0.0, abs_tol=1e-9) and state.stops


def test_no_rule_never_stops_and_nothing_measured_is_not_judged() -> None:
    history = [view(1.0), view(3.0, max_num_seqs=16), view(1 / 3, max_num_batched_tokens=1024)]
    assert not stopping.assess(spec_of(SPACE, chance_below=None), history).stops
    empty = stopping.assess(spec_of(SPACE), [])
    assert empty.chance is None and not empty.stops and "no config measured yet" in empty.line(1.0)
    assert "stopping rule: none" in stopping.assess(spec_of(SPACE, chance_below=None), []).line(1.0)


def test_a_continuous_range_is_not_judged() -> None:
    spec = spec_of({"gpu-memory-utilization": {"low": 0.5, "high": 0.9}}, strategy="optuna")
    state = stopping.assess(spec, [view(1.0), TrialView(params={"gpu-memory-utilization": 0.7}, samples=(2.0, 2.1))])
    assert state.chance is None and not state.stops and "not enumerable" in state.why_unjudged


def test_the_threshold_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="chance_below"):
        spec_of(SPACE, chance_below=0.2)


def _study(tmp_path: Path, engine: CountingEngine, spec: StudySpec) -> StudyRunner:
    runner = StudyRunner(spec, tmp_path / "study", display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
    runner.store.set_meta_json(known.DEFAULTS_META, CPU_DEFAULTS.model_dump(mode="json"))  # no vLLM here
    runner.engine = runner.executor.engine = engine
    return runner


def test_a_study_stopped_by_its_rule_records_why_and_a_resume_boots_nothing_more(tmp_path: Path) -> None:
    """A 2 x 2 grid whose effects add on the log scale: the larger batch budget about triples the
    output throughput (a fake server with a third of the inter-token latency), more sequences cut
    it to a third. The grid's Gray-code order from the baseline boots the batch budget, then both,
    and leaves more sequences alone for last: predicted at a third of the baseline, far below the
    leader, so the rule ends the search without booting it."""
    spec = grid_spec(stopping={"chance_below": 0.05})
    itl = GRID_ITL
    with ExitStack() as servers:
        urls = {k: servers.enter_context(fake_server(ttft_ms=1, itl_ms=v)) for k, v in itl.items()}

        def url_for(config):
            return urls[_point(config)]

        engine = CountingEngine(urls[(4, 256)], lambda c: BootFacts(), url_for=url_for)
        _study(tmp_path, engine, spec).run()
        booted = [_point(c) for c in engine.started]
        assert booted == [(4, 256), (4, 1024), (16, 1024)]   # (16, 256): ruled out, never booted
        store = StudyStore.open_existing(tmp_path / "study", read_only=True)
        stop = store.search_stop()
        assert stop is not None and stop.threshold == 0.05 and stop.chance is not None and stop.chance < 0.05
        assert stop.after_trials == 3 and "most promising max-num-seqs=16 at" in stop.reason
        assert search_stop_line(store, spec).startswith("search stopped by its rule after 3 trials")
        store.close()
        shown = CliRunner().invoke(app, ["status", str(tmp_path / "study")])
        assert shown.exit_code == 0, shown.output
        assert "search stopped by its rule after 3 trials" in " ".join(shown.output.split())
        reported = CliRunner().invoke(app, ["report", str(tmp_path / "study")])
        assert reported.exit_code == 0, reported.output
        assert ("The search was ended by its stopping rule after 3 trials"
                in (tmp_path / "study" / "report.md").read_text())

        again = CountingEngine(urls[(4, 256)], lambda c: BootFacts(), url_for=url_for)
        _study(tmp_path, again, spec).run()
        assert again.started == []   # the resumed study goes straight to its verdict


def test_a_study_killed_before_its_rule_stopped_it_stops_at_the_same_point_on_resume(tmp_path: Path) -> None:
    """The rule is a function of the store: a study ended after one candidate (its trial budget)
    and resumed with more budget boots the next config and stops where an unbroken run does."""
    spec = grid_spec(stopping={"chance_below": 0.05}, budget={"trials": 1})
    itl = GRID_ITL
    with ExitStack() as servers:
        urls = {k: servers.enter_context(fake_server(ttft_ms=1, itl_ms=v)) for k, v in itl.items()}

        def url_for(config):
            return urls[_point(config)]

        first = CountingEngine(urls[(4, 256)], lambda c: BootFacts(), url_for=url_for)
        _study(tmp_path, first, spec).run()
        assert [_point(c) for c in first.started] == [(4, 256), (4, 1024)]
        more = spec.model_copy(update={"budget": spec.budget.model_copy(update={"trials": 3})})
        second = CountingEngine(urls[(4, 256)], lambda c: BootFacts(), url_for=url_for)
        _study(tmp_path, second, more).run()
        assert [_point(c) for c in second.started] == [(16, 1024)]
    store = StudyStore.open_existing(tmp_path / "study", read_only=True)
    stop = store.search_stop()
    assert stop is not None and stop.after_trials == 3


def _point(config) -> tuple[int, int]:
    return int(config.flags["max-num-seqs"]), int(config.flags["max-num-batched-tokens"])


def test_without_the_rule_the_same_study_boots_the_whole_grid(tmp_path: Path) -> None:
    spec = StudySpec.model_validate({
        "name": "full-grid",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(MODEL_WITHOUT_WEIGHTS),
                   "args": {"max-num-seqs": 4, "max-num-batched-tokens": 256}},
        "space": SPACE,
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 16, "num_prompts": 2, "warmups": 0}],
        "strategy": "grid", "replicates": 2, "finalists": 0, "baseline_every": 5,
    })
    with fake_server(ttft_ms=1, itl_ms=6) as url:
        engine = CountingEngine(url, lambda c: BootFacts())
        _study(tmp_path, engine, spec).run()
    assert len(engine.started) == 4
    store = StudyStore.open_existing(tmp_path / "study", read_only=True)
    assert store.search_stop() is None
    assert search_stop_line(store, spec).startswith("stopping rule: none")


def test_a_space_too_large_to_enumerate_is_not_judged() -> None:
    space = {"max-num-seqs": list(range(1, 201)), "max-num-batched-tokens": list(range(256, 256 + 101))}
    state = stopping.assess(spec_of(space), [view(1.0), view(3.0, max_num_seqs=16)])
    assert state.chance is None and not state.stops and "20,200 configs" in state.why_unjudged


def test_a_rule_added_to_a_running_study_stops_it_where_the_measurements_say(tmp_path: Path) -> None:
    """A grid started without a stopping rule (its budget ends it after one candidate) is resumed
    with the rule added: no "different study" refusal, and the search ends where a study with the
    rule from the start ends (the test above), and stays ended on the next resume. Resumed without
    the rule, the search is reopened and boots the config the rule had left out."""
    itl = GRID_ITL
    with ExitStack() as servers:
        urls = {k: servers.enter_context(fake_server(ttft_ms=1, itl_ms=v)) for k, v in itl.items()}

        def url_for(config):
            return urls[_point(config)]

        def booted(spec: StudySpec) -> list[tuple[int, int]]:
            engine = CountingEngine(urls[(4, 256)], lambda c: BootFacts(), url_for=url_for)
            _study(tmp_path, engine, spec).run()
            return [_point(c) for c in engine.started]

        assert booted(grid_spec(budget={"trials": 1})) == [(4, 256), (4, 1024)]
        assert booted(grid_spec(stopping={"chance_below": 0.05})) == [(16, 1024)]
        store = StudyStore.open_existing(tmp_path / "study", read_only=True)
        stop = store.search_stop()
        store.close()
        assert stop is not None and stop.after_trials == 3 and stop.chance is not None
        assert booted(grid_spec(stopping={"chance_below": 0.05})) == []
        assert booted(grid_spec()) == [(16, 256)]
