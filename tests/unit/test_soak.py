"""`servetune soak`: the stability verdict against the fake server and the stand-in engine (stable,
latency drift, a crash mid-soak, an interrupt), and the trend test on series of known shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import servetune.soak.run as soak_run
from servetune.errors import ServetuneError
from servetune.soak import analyze, parse_duration
from servetune.soak.window import Window
from tests.fakes.launch import fake_server
from tests.fakes.standin import study_text
from tests.unit.cli_run import servetune

# Two light scenarios in turn: a soak's windows alternate between them.
SCENARIOS = [{"name": "pair", "input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 6, "warmups": 1},
             {"name": "single", "input_len": 32, "output_len": 4, "concurrency": 1, "num_prompts": 6, "warmups": 1}]


def _study(tmp_path: Path, args: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(study_text("soak", scenarios=SCENARIOS, args=args))
    return path


def _soak(tmp_path: Path, *args: str | Path, duration: str = "10s") -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "soak.json"
    run = servetune("soak", *args, "--out", out, "--duration", duration, "--window", "1s")
    doc = json.loads(out.read_text()) if out.is_file() else {}
    return run.code, doc, run.stdout + run.stderr


@pytest.mark.slow  # a 10-30 s soak
def test_a_steady_server_is_stable(tmp_path: Path) -> None:
    # TTFT 80 ms: a few ms of host jitter (a shared machine) stay well under the 10 % a drift needs.
    with fake_server(ttft_ms=80, itl_ms=4) as url:
        code, doc, text = _soak(tmp_path, _study(tmp_path), "--url", url)
    assert code == 0, text
    assert doc["verdict"] == "stable", doc["verdict_line"]
    assert doc["status"] == "complete" and doc["crash"] is None
    assert len(doc["windows"]) >= 4
    assert {w["scenario"] for w in doc["windows"]} == {"pair", "single"}
    assert {t["signal"] for t in doc["trends"]} >= {"ttft", "tpot", "rss"}  # the fake's RSS, found by its port
    assert all(w["rss_mib"] > 0 for w in doc["windows"])
    assert (tmp_path / "soak.md").read_text().startswith("# Soak of")
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
    assert all(Path(w["run"]).is_file() for w in doc["windows"])


@pytest.mark.slow  # a 10-30 s soak
def test_a_server_whose_latency_grows_is_unstable_with_the_slopes_interval(tmp_path: Path) -> None:
    # +5 ms TTFT per second up: about +100 % over a 10 s soak.
    with fake_server(ttft_ms=40, itl_ms=4, ttft_growth_ms_per_s=5) as url:
        code, doc, text = _soak(tmp_path, _study(tmp_path), "--url", url)
    assert code == 3, text
    assert doc["verdict"] == "unstable"
    assert "ttft" in doc["unstable"]
    assert doc["verdict_line"].startswith("soak: UNSTABLE: latency drift: TTFT slope +")
    ttft = next(t for t in doc["trends"] if t["signal"] == "ttft")
    assert 0 < ttft["slope_low"] <= ttft["slope_per_h"] <= ttft["slope_high"]
    assert ttft["change_low"] > 10 and ttft["p_adjusted"] < 0.05
    assert "latency drift" in text
    assert "| ttft |" in (tmp_path / "soak.md").read_text()


@pytest.mark.slow  # a 10-30 s soak
def test_a_server_that_dies_mid_soak_is_crashed_with_its_window_and_the_series_before(tmp_path: Path) -> None:
    # The stand-in, booted from the study file (2 ms TTFT: some 300 requests a 1 s window), exits when
    # request 700 arrives: a few windows in.
    study = _study(tmp_path, args={"fault": "crash-after", "fault-after": 700})
    code, doc, text = _soak(tmp_path, study, duration="30s")
    assert code == 3, text
    assert doc["verdict"] == "crashed"
    crash = doc["crash"]
    assert crash["window"] == len(doc["windows"]) - 1 >= 1  # it died in the last window; earlier ones kept
    assert crash["reason"] == "the server exited with code 1"
    assert crash["outcome"] == "crashed" and "fault crash-after" in crash["log_tail"]
    assert any("stand-in engine core died" in line for line in crash["evidence"])  # engine/classify.py's
    assert all(w["outcome"] == "ok" for w in doc["windows"][:-1])
    assert doc["verdict_line"].startswith(f"soak: CRASHED: in window {crash['window']}")
    assert "## Crash" in (tmp_path / "soak.md").read_text()
    assert doc["target"]["config"]["fault"] == "crash-after"


@pytest.mark.slow  # a 10 s soak
def test_a_server_that_leaks_memory_is_unstable_with_its_growth(tmp_path: Path) -> None:
    # 256 KiB kept per request, some 20 requests a second: the fake's RSS doubles within seconds.
    with fake_server(ttft_ms=40, itl_ms=4, leak_kib_per_request=256) as url:
        code, doc, text = _soak(tmp_path, _study(tmp_path), "--url", url)
    assert code == 3, text
    assert doc["verdict"] == "unstable" and "rss" in doc["unstable"], doc["verdict_line"]
    assert "memory growth: server memory (RSS) slope +" in doc["verdict_line"]
    rss = next(t for t in doc["trends"] if t["signal"] == "rss")
    assert rss["slope_low"] > 0 and rss["change_low"] > 10
    assert doc["windows"][-1]["rss_mib"] > doc["windows"][0]["rss_mib"]


def test_a_server_gone_at_its_url_is_crashed(tmp_path: Path) -> None:
    with fake_server(ttft_ms=20, itl_ms=2, die_after_requests=40) as url:
        code, doc, text = _soak(tmp_path, _study(tmp_path), "--url", url)
    assert code == 3, text
    assert doc["verdict"] == "crashed"
    assert doc["crash"]["reason"].startswith(("health check failed twice", "the server process"))


def test_ctrl_c_writes_what_was_measured_and_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured = soak_run.measure_window
    calls = []

    def interrupted_third(*args: Any, **kwargs: Any) -> Window:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return measured(*args, **kwargs)

    monkeypatch.setattr(soak_run, "measure_window", interrupted_third)
    with fake_server(ttft_ms=20, itl_ms=2) as url:
        code, doc, text = _soak(tmp_path, _study(tmp_path), "--url", url)
    assert code == 130, text
    assert doc["status"] == "interrupted" and len(doc["windows"]) == 2
    assert "interrupted; kept 2 windows" in text


def _windows(n: int) -> tuple[list[float], list[str]]:
    return [i / 60 for i in range(n)], ["a" if i % 2 else "b" for i in range(n)]


def test_memory_that_grows_is_unstable_and_latency_alone_is_not_blamed() -> None:
    hours, scenarios = _windows(12)
    ttft = [(50.0 if s == "a" else 80.0) * (1 + 0.01 * ((i * 7) % 3 - 1)) for i, s in enumerate(scenarios)]
    rss = [1000.0 + 40 * i + (i % 3) for i in range(12)]
    result = analyze({"ttft": ttft, "rss": rss}, hours, scenarios)
    assert result.verdict == "unstable"
    assert [t.signal for t in result.unstable] == ["rss"]
    assert "memory growth" in result.line()
    json.dumps([t.__dict__ for t in result.trends])  # plain floats and bools: the result JSON takes them


def test_kv_use_that_keeps_climbing_is_unstable_and_a_small_climb_is_not() -> None:
    hours, scenarios = _windows(12)
    ttft = [50.0 * (1 + 0.01 * (i % 3)) for i in range(12)]
    climbing = [20.0 + 3.0 * i + (i % 2) for i in range(12)]      # +33 points over the soak
    assert [t.signal for t in analyze({"ttft": ttft, "kv_cache_usage": climbing}, hours, scenarios).unstable] \
        == ["kv_cache_usage"]
    creeping = [20.0 + 0.2 * i + 0.1 * (i % 2) for i in range(12)]  # significant, but 2 points: under 10
    assert analyze({"ttft": ttft, "kv_cache_usage": creeping}, hours, scenarios).verdict == "stable"


def test_scenario_offsets_are_not_a_trend() -> None:
    # A heavy and a light scenario in turn, each flat: no drift, though the series zigzags.
    hours, scenarios = _windows(10)
    ttft = [(50.0 if s == "a" else 500.0) * (1 + 0.01 * (i % 3)) for i, s in enumerate(scenarios)]
    result = analyze({"ttft": ttft}, hours, scenarios)
    assert result.verdict == "stable", result.line()


def test_too_few_windows_give_no_verdict() -> None:
    result = analyze({"ttft": [10.0, 11.0]}, [0.0, 0.1], ["a", "a"])
    assert result.verdict == "unknown" and "too few windows" in result.line()


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--duration") == seconds


@pytest.mark.parametrize("text", ["", "2x", "-1h", "0s", "h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ServetuneError, match="--duration"):
        parse_duration(text, "--duration")


@pytest.mark.parametrize("args, message", [
    (["--duration", "soon"], "--duration"),
    (["--duration", "10s", "--window", "1m"], "--window"),
    (["--duration", "10s", "--alpha", "2"], "--alpha"),
    (["--duration", "10s"], "--scenario"),
    (["--duration", "10s", "--scenario", "chat", "--server-log", "/nonexistent/server.log"], "--server-log"),
])
def test_bad_options_are_one_line_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    run = servetune("soak", "--url", "http://127.0.0.1:9", "--out", tmp_path / "s.json", *args)
    assert run.code == 2 and len(run.error_lines) == 1 and message in run.stderr, run.stderr
    assert not (tmp_path / "s.json").exists()


def test_a_result_named_as_another_format_is_refused(tmp_path: Path) -> None:
    run = servetune("soak", "--url", "http://127.0.0.1:9", "--scenario", "chat", "--out", tmp_path / "s.md",
                    "--duration", "10s")
    assert run.code == 2 and "promises Markdown, but this writes JSON" in run.stderr
    assert not (tmp_path / "s.md").exists()


def test_an_existing_result_is_not_overwritten_without_force(tmp_path: Path) -> None:
    (tmp_path / "s.md").write_text("mine")
    run = servetune("soak", "--url", "http://127.0.0.1:9", "--scenario", "chat", "--out", tmp_path / "s.json",
                    "--duration", "10s")
    assert run.code == 2 and "s.md: exists; pass --force" in run.stderr
    assert (tmp_path / "s.md").read_text() == "mine"
