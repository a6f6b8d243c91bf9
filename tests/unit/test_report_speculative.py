"""The report's speculative-decoding section: acceptance per config and scenario, and the peak of
a num_speculative_tokens sweep named per scenario."""

from __future__ import annotations

from pathlib import Path

from report_study import build_study

from servetune.analysis.types import ConfigResult, Estimate, ScenarioResult, StudyAnalysis
from servetune.engine.config import Config
from servetune.report import write_report
from servetune.report.speculative import acceptance_rows, peak_line, sweep_peaks

BASE = Config.of({"load-format": "dummy", "speculative-config": {"method": "ngram", "num_speculative_tokens": 2}})


def _with_n(n: int | None) -> Config:
    flags = dict(BASE.flags)
    if n is None:
        flags.pop("speculative-config")
    else:
        flags["speculative-config"] = {"method": "ngram", "num_speculative_tokens": n}
    return Config(flags=flags)


def _stats(n: int) -> dict[str, float]:
    """Counter deltas of a run: 100 drafts of n tokens, acceptance halving per position."""
    at = [100 * 0.8 * 0.5**k for k in range(n)]
    return {"spec_decode_drafts": 100.0, "spec_decode_draft_tokens": 100.0 * n, "spec_decode_accepted_tokens": sum(at),
            **{f"spec_decode_accepted_tokens_pos{k}": v for k, v in enumerate(at)}}


def _config(n: int | None, throughput: dict[str, tuple[float, float, float]], base: bool = False) -> ConfigResult:
    config = _with_n(n)
    scenarios = {s: ScenarioResult(s, 3, {"output_throughput": Estimate(*v, 3)}, server=_stats(n) if n else {})
                 for s, v in throughput.items()}
    return ConfigResult(config.key(), config, {}, "baseline" if base else config.label(BASE), [1], "ok",
                        scenarios, is_baseline=base)


def _analysis(*configs: ConfigResult) -> StudyAnalysis:
    return StudyAnalysis("spec", "output_throughput", "maximize", configs[0], list(configs), None, "")


def test_the_peak_n_is_named_per_scenario_with_its_interval() -> None:
    analysis = _analysis(
        _config(2, {"short": (100, 95, 105), "long": (50, 48, 52)}, base=True),
        _config(None, {"short": (80, 76, 84), "long": (40, 38, 42)}),
        _config(3, {"short": (120, 115, 125), "long": (55, 53, 57)}),
        _config(6, {"short": (110, 105, 115), "long": (64, 62, 66)}),
    )
    peaks = {p.scenario: p for p in sweep_peaks(analysis)}
    assert peaks["short"].peak.tokens == 3 and peaks["long"].peak.tokens == 6   # as the field saw
    assert peaks["short"].peak.value == Estimate(120, 115, 125, 3)
    assert peaks["short"].runner_up.tokens == 6 and not peaks["short"].separated  # 115 <= 115: overlap
    assert peaks["long"].separated
    assert [p.tokens for p in peaks["long"].points] == [0, 2, 3, 6]
    assert peak_line(peaks["short"]) == ("speculative decoding, short: n = 3 peaks (output_throughput 120 [115, 125]; "
                                         "runner-up n = 6: 110 [105, 115], intervals overlap)")


def test_configs_that_change_more_than_n_are_not_part_of_the_sweep() -> None:
    other = _with_n(3).merged(Config.of({"max-num-seqs": 64}))
    odd = ConfigResult(other.key(), other, {}, "x", [1], "ok",
                       {"short": ScenarioResult("short", 3, {"output_throughput": Estimate(999, 990, 1000, 3)})})
    analysis = _analysis(_config(2, {"short": (100, 95, 105)}, base=True), odd,
                         _config(4, {"short": (90, 85, 95)}))
    (peak,) = sweep_peaks(analysis)
    assert peak.peak.tokens == 2 and [p.tokens for p in peak.points] == [2, 4]
    assert sweep_peaks(_analysis(_config(2, {"short": (100, 95, 105)}, base=True), odd)) == []


def test_acceptance_rows_per_config_and_scenario() -> None:
    rows = acceptance_rows(_analysis(_config(2, {"short": (1, 1, 1)}, base=True), _config(None, {"short": (1, 1, 1)})),
                           BASE)
    assert len(rows) == 1  # the config without speculative decoding reports none
    (row,) = rows
    assert (row.method, row.tokens) == ("ngram", 2)
    assert row.rate == (80 + 40) / 200 and row.mean_length == 1 + 120 / 100
    assert row.per_position == (0.8, 0.4)


def test_report_shows_the_section_only_when_the_server_reported_drafts(tmp_path: Path) -> None:
    store, analysis = build_study(tmp_path / "plain")
    md = write_report(analysis, store, tmp_path / "plain" / "report")["markdown"].read_text()
    assert "## Speculative decoding" not in md
    store, analysis = build_study(tmp_path / "spec")
    analysis.baseline.scenarios["burst"].server.update(_stats(3))
    paths = write_report(analysis, store, tmp_path / "spec" / "report")
    md = paths["markdown"].read_text()
    assert "## Speculative decoding" in md
    assert "| baseline | burst | – | 0 | 47 % | 2.4 | 80 %, 40 %, 20 % |" in md  # 140 of 300 drafted, 1 + 140 / 100
    assert "Speculative decoding</h2>" in paths["html"].read_text()
