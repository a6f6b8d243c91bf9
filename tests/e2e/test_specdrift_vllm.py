"""Speculative decoding and the regression protocol on the real vLLM CPU build.

- An ngram num_speculative_tokens sweep (no draft weights): every run records acceptance from the
  server's /metrics and the report names the peak n per scenario.
- `servetune drift` against a server with no known slowdown gives no verdict of slowdown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.engine import speculative
from servetune.load import speculative_metrics as sm
from servetune.store import StudyStore
from tests.conftest import VllmTestServer, servetune

STUDIES = Path(__file__).parent / "studies"
pytestmark = pytest.mark.vllm


# Acceptance counts from /metrics and the report's peaks: nothing timed (its pinned EngineCore may
# share a core with another test's, which only slows it).
@pytest.mark.concurrent
def test_ngram_sweep_records_acceptance_and_names_a_peak_per_scenario(tmp_path: Path) -> None:
    out = tmp_path / "spec"
    done = servetune("tune", str(STUDIES / "specdecode.yaml"), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    store = StudyStore.open_existing(out)
    booted = [t for t in store.trials() if t.outcome == "ok"]
    assert {speculative.speculative_tokens(t.config) for t in booted} == {1, 2, 4}, done.stdout
    for t in booted:
        n = speculative.speculative_tokens(t.config)
        shown = t.boot_facts.engine_config["speculative_config"]  # what the engine ran
        assert "method='ngram'" in shown and f"num_spec_tokens={n}" in shown
        for run in store.runs(t.id):
            stats = run.server_stats
            assert stats["spec_decode_drafts"] > 0, stats
            assert 0 <= stats[sm.RATE] <= 1 and stats[sm.MEAN_LENGTH] >= 1
            assert [f"{sm.RATE_AT}{k}" in stats for k in range(n)] == [True] * n
    # the greedy loops are predictable: some drafts are accepted
    assert any(r.server_stats["spec_decode_accepted_tokens"] > 0 for t in booted for r in store.runs(t.id))
    md = (out / "report.md").read_text()
    assert "## Speculative decoding" in md and "mean acceptance length" in md
    peaks = [line for line in md.splitlines() if line.startswith(("| short | output_throughput", "| long | output_throughput"))]
    assert len(peaks) == 2, md


def test_drift_on_a_server_without_a_slowdown_finds_none(vllm_server: VllmTestServer, tmp_path: Path) -> None:
    out = tmp_path / "drift.json"
    done = servetune("drift", "--url", vllm_server.url, "--model", vllm_server.model, "--tokenizer",
                     str(vllm_server.model_dir), "--out", str(out), "--short-input-len", "128",
                     "--short-output-len", "48", "--long-input-len", "1800", "--long-output-len", "8")
    print(done.stdout)  # the terminal output, for a look with -s
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "no_slowdown", done.stdout
    assert [p["phase"] for p in doc["phases"]] == ["short-after-0", "long-1", "short-after-1", "long-2",
                                                    "short-after-2"]
    assert all(p["failed"] == 0 for p in doc["phases"])
    assert len(doc["effects"]) == 4 and "no slowdown" in doc["verdict_line"]
