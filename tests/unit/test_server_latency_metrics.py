"""The server's own latency histograms (TTFT, E2E, queue time) read from a real vLLM 0.32 CPU
/metrics page (tests/fixtures/metrics, taken mid-run: more first tokens than finished requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.load.scrape import histogram_means, parse_values
from servetune.vocabulary import VLLM_METRIC_NAMES

PAGE = (Path(__file__).parents[1] / "fixtures" / "metrics" / "vllm-0.32-cpu.txt").read_text()
HIST = VLLM_METRIC_NAMES.histograms


def test_histograms_give_sum_and_count_only() -> None:
    values = parse_values(PAGE, dict(VLLM_METRIC_NAMES.counters), VLLM_METRIC_NAMES.per_label, HIST)
    assert values["server_ttft_count"] == 121.0
    assert values["server_ttft_sum"] == pytest.approx(7.076930284500122)
    assert values["server_e2el_count"] == 113.0 and values["server_queue_count"] == 113.0
    assert not [k for k in values if k.startswith("server_") and not k.endswith(("_sum", "_count"))]
    # the counters are read as before, beside the histograms
    assert values["prompt_tokens"] > 0 and values["requests_succeeded"] == 113.0


def test_means_are_deltas_over_the_run_in_ms() -> None:
    before = {"server_ttft_sum": 1.0, "server_ttft_count": 10.0, "server_e2el_sum": 5.0, "server_e2el_count": 10.0}
    after = {"server_ttft_sum": 1.5, "server_ttft_count": 20.0, "server_e2el_sum": 5.0, "server_e2el_count": 10.0}
    deltas = {k: after[k] - before[k] for k in after}
    means = histogram_means(deltas, HIST.values())
    assert means == {"server_ttft_mean_ms": pytest.approx(50.0)}  # no E2E finished, no queue counted: no mean
