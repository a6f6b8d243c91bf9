"""A poisoned compile cache in a study of the stand-in engine: the boot it slows is found far from
its config's other boots, excluded, its config booted again on a wiped cache, and the report says so.

The stand-in keeps a compile-cache entry per config under the VLLM_CACHE_ROOT the tuner gives it
(tests/fakes/standin_engine.py); with `fault: poison-cache` the baseline's fourth boot leaves a
marker in its entry and serves 20x slower, as every later boot that finds the marker would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.store import StudyStore, TrialRole
from tests.fakes import standin

pytestmark = pytest.mark.concurrent

STUDY_TIMEOUT_S = 180


def test_a_boot_slowed_by_a_poisoned_cache_is_excluded_and_booted_again_on_a_wiped_cache(
        tmp_path: Path, marks: list[str]) -> None:
    state = tmp_path / "boots.json"   # where the stand-in counts each config's boots
    doc = json.loads(standin.study_text(
        "poisoned-cache", args={"max-num-seqs": 1, "fault": "poison-cache", "fault-after": 3,
                                "fault-state": str(state)},
        space={"max-num-seqs": [2, 3, 4, 5]}, trials=4,
        scenarios=[{**standin.TINY_SCENARIO, "output_len": 16}]))
    doc["baseline_every"] = 1   # the baseline is booted before every candidate: its 4th boot is #7
    study = tmp_path / "study.yaml"
    study.write_text(json.dumps(doc))
    out = tmp_path / "study"
    mark = standin.new_mark()
    marks.append(mark)

    result = standin.run_tuner(study, out, mark, timeout_s=STUDY_TIMEOUT_S, report=True)

    assert result.returncode in (0, 1), result.stderr[-3000:]
    store = StudyStore.open_existing(out, read_only=True)
    trials = store.trials()
    baseline_boots = [t for t in trials if t.role.is_baseline]
    poisoned = baseline_boots[3]
    assert poisoned.cache is not None and poisoned.cache.state == "warm"   # it found the entry the earlier boots made
    assert poisoned.exclusion is not None, [(t.seq, t.role, t.exclusion) for t in trials]
    assert [t.seq for t in trials if t.exclusion is not None] == [poisoned.seq]
    reboot = next(t for t in trials if t.replaces == poisoned.seq)
    assert reboot.role is poisoned.role is TrialRole.baseline_check
    assert reboot.ok and reboot.cache is not None
    assert reboot.cache.wipe_before_boot and reboot.cache.state == "cold" and reboot.cache.root_empty_before
    assert reboot.cache.root == poisoned.cache.root == str(out.absolute() / "cache" / "slot0")
    # every boot got the study's own cache root, and the first found it empty
    assert all(t.cache is not None and t.cache.root == poisoned.cache.root for t in trials if t.healthy_at)
    assert trials[0].cache is not None and trials[0].cache.root_empty_before and trials[0].cache.state == "cold"
    assert trials[0].cache.compile_seconds is not None

    report = (out / "report.md").read_text()
    assert "## Boots kept out of the verdict" in report
    assert f"Boot #{poisoned.seq} (baseline_check" in report
    assert f"re-booted as #{reboot.seq} on a wiped cache" in report
    assert "## Provenance" in report and str(out.absolute() / "cache" / "slot0") in report
    assert not standin.wait_gone(mark, 10)
