"""`maximize: capacity` end to end on the real vLLM CPU build, through the `servetune` command:
max-num-seqs 1 against 16 of the tiny model (64-token answers) under a p90 TTFT SLO; the study names 16 with an
interval of its capacity gain, and the report shows the capacities and the curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.analysis import analysis, capacity_runs
from servetune.store import StudyStore
from servetune.study import load_study
from tests.conftest import servetune

STUDY = Path(__file__).parent / "studies" / "capacity.yaml"
pytestmark = pytest.mark.vllm


def test_a_capacity_study_names_the_config_that_serves_more(tmp_path: Path) -> None:
    done = servetune("tune", str(STUDY), "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_study(STUDY)
    store = StudyStore.open_existing(tmp_path)
    assert [t.role for t in store.trials()] == ["baseline", "candidate", "baseline_final", "finalist"]
    for trial in store.trials():
        runs = store.runs(trial.id)
        (cap,) = [r for r in runs if r.replicate == capacity_runs.CAPACITY_REPLICATE]
        levels = [r for r in runs if capacity_runs.is_level_run(r.summary)]
        assert cap.summary["levels_measured"] == len(levels) >= 2 and cap.summary["capacity"] >= 1
    result = analysis.analyze(store, spec)
    assert result.winner is not None, result.winner_reason
    assert result.winner.config.flags["max-num-seqs"] == 16
    effect = result.winner.objective_effect
    assert effect is not None and effect.verdict == "better" and effect.ci_low_pct > 0, effect
    report = (tmp_path / "report.md").read_text()
    assert "Capacity under the SLOs" in report and (tmp_path / "plots" / "latency_vs_load.png").is_file()
