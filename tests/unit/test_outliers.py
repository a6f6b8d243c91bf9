"""The outlier rule (stats/outliers.py) and what a study does with a far boot (analysis/outliers.py):
exclude it once per config, with why, boot its config again on a wiped cache, leave it out of the verdict."""

from __future__ import annotations

import numpy as np
import pytest

from servetune.analysis import analysis, outliers
from servetune.engine.cache import CacheRecord
from servetune.load.records import RunResult
from servetune.stats.outliers import FLOOR, K, far_boots
from servetune.store import StudyStore, TrialRole
from servetune.study import parse_study
from servetune.tune import phases
from servetune.vocabulary import Outcome

STUDY = """
name: unit
engine: {command: [python, -m, vllm.entrypoints.openai.api_server], model: m, args: {max-num-seqs: 4}}
space: {max-num-seqs: [4, 8]}
scenarios:
  - {name: a, input_len: 8, output_len: 8, concurrency: 1, num_prompts: 4}
objective: {maximize: output_throughput}
replicates: 2
"""


def test_a_boot_far_from_agreeing_boots_is_found() -> None:
    far = far_boots([100.0, 101.0, 99.0, 100.5, 14.0])
    assert [f.index for f in far] == [4]
    assert far[0].deviations > K and far[0].median == pytest.approx(100.0)


def test_a_fast_outlier_counts_as_a_slow_one() -> None:
    assert [f.index for f in far_boots([100.0, 101.0, 99.0, 700.0])] == [3]


def test_fewer_than_four_boots_say_nothing() -> None:
    assert far_boots([100.0, 100.0, 10.0]) == []


def test_the_floor_keeps_a_few_percent_from_being_far_when_boots_agree_exactly() -> None:
    assert far_boots([1.0, 1.0, 1.0, 1.03]) == []                        # 3 % < K x 2 %
    assert [f.index for f in far_boots([1.0, 1.0, 1.0, 1.15])] == [3]     # 15 % > K x 2 %
    assert far_boots([1.0, 1.0, 1.0, 1.15], floor=0.05) == []


def test_a_noisy_config_is_not_trimmed() -> None:
    # boot-to-boot noise of about 30 %: a boot at half the median is within it
    assert far_boots([1.0, 1.4, 0.75, 1.25, 0.5]) == []


def test_the_false_flag_rate_under_boot_noise_alone_is_small_with_many_boots() -> None:
    rng = np.random.default_rng(0)
    flagged = sum(bool(far_boots(list(np.exp(rng.normal(0, 0.1, 8))))) for _ in range(2000))
    assert flagged / 2000 < 0.03


def test_non_positive_values_are_not_judged() -> None:
    assert far_boots([1.0, 1.0, 1.0, 0.0]) == []
    assert FLOOR > 0


def _boot(store: StudyStore, spec, role: str, params: dict, value: float, *, reboot_of: int | None = None,
          slot: int = 0):
    cache = None if reboot_of is None else CacheRecord(wipe_before_boot=True, replaces_trial=reboot_of)
    trial = store.begin_trial(TrialRole(role), spec.config_for(params), params, cache=cache, slot=slot)
    for rep in (1, 2):
        store.record_run(trial.id, rep, RunResult(scenario="a", summary={"output_throughput": value}),
                         started_at=0, ended_at=1)
    store.finish_trial(trial.id, Outcome.ok)
    return store.trial(trial.id)


@pytest.fixture
def study(tmp_path):
    return StudyStore(tmp_path / "study.sqlite"), parse_study(STUDY)


def test_the_far_boot_is_excluded_once_rebooted_and_left_out_of_the_verdict(study) -> None:
    store, spec = study
    for value in (100, 101, 99):
        _boot(store, spec, "baseline_check", {}, value)
    slow = _boot(store, spec, "baseline_check", {}, 10)
    assert len(analysis.analyze(store, spec).baseline.objective_boots) == 4

    found = outliers.next_reboot(store, spec)
    assert found is not None and found.trial.id == slow.id and found.exclusion is not None
    assert "from the median of the config's 4 boots" in found.exclusion.why
    store.exclude_trial(slow.id, found.exclusion)
    assert store.trial(slow.id).exclusion == found.exclusion           # stored, and read back
    # stored but not yet re-booted (a kill between the two): the same boot is asked for again
    again = outliers.next_reboot(store, spec)
    assert again is not None and again.trial.id == slow.id and again.exclusion is None
    base = analysis.analyze(store, spec).baseline
    assert len(base.objective_boots) == 3 and slow.id in base.trial_ids

    _boot(store, spec, "baseline_check", {}, 100, reboot_of=slow.seq)
    assert outliers.next_reboot(store, spec) is None
    # a second far boot of the same config stays in: one exclusion per config
    _boot(store, spec, "baseline_check", {}, 9)
    assert outliers.next_reboot(store, spec) is None
    assert len(analysis.analyze(store, spec).baseline.objective_boots) == 5


def test_a_boot_on_a_wiped_cache_is_never_excluded(study) -> None:
    store, spec = study
    for value in (100, 101, 99):
        _boot(store, spec, "baseline_check", {}, value)
    _boot(store, spec, "baseline_check", {}, 10, reboot_of=99)
    assert outliers.next_reboot(store, spec) is None


def test_an_excluded_boot_is_not_in_the_strategies_history(study) -> None:
    store, spec = study
    base = _boot(store, spec, "baseline", {}, 100)
    from servetune.store import Exclusion
    store.exclude_trial(base.id, Exclusion("far", 1.0, 1.0, 0.02, K))
    assert [v.trial.id for v in analysis.history(store, spec) if v.trial is not None] == []


def test_the_reboot_waits_for_the_slot_whose_cache_it_wipes(study) -> None:
    store, spec = study
    _boot(store, spec, "baseline_check", {}, 99)
    for value in (100, 101):   # the objective is a ratio to the baseline of the boot's own slot
        _boot(store, spec, "baseline_check", {}, value, slot=1)
    slow = _boot(store, spec, "baseline_check", {}, 10, slot=1)
    notes: list[str] = []
    state = phases.StudyState(store, spec, spec.baseline_config(), eta=lambda: None, note=notes.append)
    both = phases.SlotsNow(live=2, running=0, live_ids=frozenset({0, 1}))
    assert state.reboot(0, both) is None                  # found and excluded, but not slot 0's to boot
    assert store.trial(slow.id).exclusion is not None and len(notes) == 1
    work = state.reboot(1, both)
    assert work is not None and (work.role, work.replaces) == (TrialRole.baseline_check, slow.seq)
    # slot 1 gone: another slot boots it (on its own wiped cache)
    only_zero = phases.SlotsNow(live=1, running=0, live_ids=frozenset({0}))
    work = state.reboot(0, only_zero)
    assert work is not None and work.replaces == slow.seq and len(notes) == 1   # excluded once
