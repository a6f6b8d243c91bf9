"""`servetune drift`: a step injected after long requests is found, its absence is not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servetune.drift import DriftProtocol, analyze
from tests.fakes.launch import fake_server
from tests.unit.cli_run import servetune

AFTER = {"short-after-0": 0, "short-after-1": 1, "short-after-2": 2}


def _phases(steps: tuple[float, float, float], n: int = 3, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Per phase, n requests' TTFT and TPOT (ms): 2 % log-normal noise around 20 ms TTFT and
    10 ms * step TPOT."""
    rng = np.random.default_rng(seed)
    return {p: {"ttft": list(20.0 * np.exp(rng.normal(0, 0.02, n))),
                "tpot": list(10.0 * step * np.exp(rng.normal(0, 0.02, n)))}
            for p, step in zip(AFTER, steps)}


def test_protocol_is_three_short_one_long_three_short_one_long_three_short() -> None:
    phases = DriftProtocol().phases()
    assert [(p.kind, p.after_long) for p in phases] == [("short", 0), ("long", 0), ("short", 1), ("long", 1),
                                                       ("short", 2)]
    scenarios = [DriftProtocol(long_input_len=1500).scenario(p) for p in phases]
    assert [s.num_prompts for s in scenarios] == [3, 1, 3, 1, 3]
    assert scenarios[1].input_len == 1500 and scenarios[0].warmups == 2 and scenarios[2].warmups == 0


def test_a_stepwise_decode_slowdown_is_named_per_phase() -> None:
    result = analyze(_phases((1.0, 1.3, 1.6)), AFTER)
    assert result.verdict == "slowdown"
    assert {(e.phase, e.metric) for e in result.slowdowns} == {("short-after-1", "tpot"), ("short-after-2", "tpot")}
    step2 = next(e for e in result.slowdowns if e.phase == "short-after-2")
    assert step2.ci_low_pct < 60.0 < step2.ci_high_pct  # the injected +60 % inside its interval
    assert "SLOWDOWN" in result.line() and "TPOT" in result.line()


def test_no_step_no_slowdown() -> None:
    result = analyze(_phases((1.0, 1.0, 1.0), seed=1), AFTER)
    assert result.verdict == "no_slowdown"
    assert len(result.effects) == 4 and all(e.verdict == "no_difference" for e in result.effects)


def test_a_significant_change_below_the_threshold_is_no_slowdown() -> None:
    """+5 % on 2 % noise is significant, yet under the 10 % a stepwise regression is about."""
    result = analyze(_phases((1.0, 1.05, 1.05)), AFTER, min_effect_pct=10.0)
    assert min(e.p_adjusted for e in result.effects if e.metric == "tpot") < 0.05
    assert result.verdict == "no_slowdown"


def _drift(url: str, out: Path) -> dict:
    run = servetune("drift", "--url", url, "--out", out, "--short-per-phase", "4", "--short-input-len", "32",
                    "--short-output-len", "24", "--long-input-len", "400", "--long-output-len", "4")
    assert run.code == 0, run.stderr
    return json.loads(out.read_text())


def test_fake_server_with_an_injected_step_is_caught(tmp_path: Path) -> None:
    # +6 ms ITL (+60 % on 10 ms) after each long prompt of 300+ tokens. TTFT 50 ms: a few ms of
    # host jitter on a loaded machine stay well under the 10 % a slowdown needs.
    with fake_server(ttft_ms=50, itl_ms=10, drift_long_tokens=300, drift_step_itl_ms=6) as url:
        doc = _drift(url, tmp_path / "drift.json")
    assert doc["verdict"] == "slowdown"
    slow = {(e["phase"], e["metric"]) for e in doc["effects"] if e["verdict"] == "worse"}
    assert slow == {("short-after-1", "tpot"), ("short-after-2", "tpot")}
    tpot = {e["phase"]: e for e in doc["effects"] if e["metric"] == "tpot"}
    assert tpot["short-after-2"]["effect_pct"] > tpot["short-after-1"]["effect_pct"] > 30  # a step per long hit
    assert [p["phase"] for p in doc["phases"]] == ["short-after-0", "long-1", "short-after-1", "long-2",
                                                    "short-after-2"]
    assert all(Path(p["run"]).is_file() for p in doc["phases"])


def test_fake_server_without_a_step_has_none(tmp_path: Path) -> None:
    with fake_server(ttft_ms=50, itl_ms=10) as url:
        doc = _drift(url, tmp_path / "drift.json")
    assert doc["verdict"] == "no_slowdown", doc["verdict_line"]
    assert len(doc["effects"]) == 4


@pytest.mark.parametrize("args, message", [
    (["--short-per-phase", "1"], "--short-per-phase"),
    (["--alpha", "2"], "--alpha"),
])
def test_bad_options_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    run = servetune("drift", "--url", "http://127.0.0.1:9", "--out", tmp_path / "d.json", *args)
    assert run.code == 2 and len(run.error_lines) == 1 and message in run.stderr
    assert not (tmp_path / "d.json").exists()
