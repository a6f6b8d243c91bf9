"""report.md / report.html / winner/ from a hand-built analysis over a real StudyStore."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import jinja2
import pytest
import yaml
from report_study import FAST, OOM, build_study

from servetune.report import context, templating, write_report
from servetune.report.html import render_html
from servetune.report.markdown import render_markdown
from servetune.vocabulary import Outcome

SECTIONS = ["## Headline", "### What was tried", "## Winning config", "## Trials", "## Per-parameter effects",
            "## Plots", "## Server-side evidence", "## Study cost"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], object]:
    root = tmp_path_factory.mktemp("study")
    store, analysis = build_study(root)
    return write_report(analysis, store, root / "report"), analysis


def test_markdown_has_every_section_with_the_numbers(written) -> None:
    paths, analysis = written
    md = paths["markdown"].read_text()
    for section in SECTIONS:
        assert section in md, section
    eff = analysis.winner.objective_effect
    assert f"{eff.effect_pct:+.1f} %" in md                       # the headline effect
    assert f"[{eff.ci_low_pct:+.1f}, {eff.ci_high_pct:+.1f}]" in md  # and its CI
    assert f"{eff.p_adjusted:.3g}" in md                          # Holm-adjusted p
    assert "58,240" in md and "28.44" in md                       # BootFacts: KV tokens, max concurrency
    assert "--max-num-seqs: requested 32, applied 16" in md        # applied-vs-requested mismatch
    assert "oom" in md and "CUDA out of memory. Tried to allocate 2 GiB" in md  # failure + its log line
    assert "| `max-num-seqs` | `4` | `32` |" in md                 # exact diff from the baseline
    assert "| `env.VLLM_CPU_OMP_THREADS_BIND` | `(default)` | `all` |" in md
    assert "preemptions 3, peak KV usage 97%" in md               # advice from server evidence
    assert "+20 %" in md                                          # ETA accuracy from meta eta_log
    for img in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (paths["markdown"].parent / img).stat().st_size > 1000


def test_every_plot_is_written(written) -> None:
    paths, _ = written
    names = {k.split(":", 1)[1] for k in paths if k.startswith("plot:")}
    assert names == {"latency_distributions", "pareto_front", "objective_over_trials", "baseline_drift"}
    for k in paths:
        if k.startswith("plot:"):
            assert paths[k].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_html_is_self_contained(written) -> None:
    paths, analysis = written
    html = paths["html"].read_text()
    assert analysis.winner.objective_effect and "Winner: max-num-seqs=32" in html
    assert html.count("data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched from elsewhere
    assert "<script" not in html


def test_winner_snippets_are_the_winning_config(written) -> None:
    paths, _ = written
    compose = yaml.safe_load(paths["winner:compose"].read_text())
    assert compose["services"]["vllm"]["environment"] == {"VLLM_CPU_OMP_THREADS_BIND": "all"}
    assert "32" in compose["services"]["vllm"]["command"]
    assert "vllm serve ./models/tiny" in paths["winner:command"].read_text()
    assert FAST.key() != OOM.key()


def test_a_vllm_study_names_vllm_where_it_names_the_engine(written) -> None:
    paths, _ = written
    md = paths["markdown"].read_text()
    assert "`vllm serve` command line:" in md
    assert "| cache | vLLM | applied ≠ requested |" in md
    assert "- Engine: vLLM 0.32.0" in md


def test_an_sglang_study_names_sglang_not_vllm(tmp_path: Path) -> None:
    store, analysis = build_study(tmp_path, engine="sglang")
    paths = write_report(analysis, store, tmp_path / "report")
    md, html = paths["markdown"].read_text(), paths["html"].read_text()
    assert "`python3 -m sglang.launch_server` command line:" in md
    assert "<h3><code>python3 -m sglang.launch_server</code> command line</h3>" in html
    assert "| cache | SGLang | applied ≠ requested |" in md and "<th>SGLang</th>" in html
    assert "- Engine: SGLang 0.5.15" in md
    assert "raising --mem-fraction-static" in md  # the advice speaks the engine's flags
    assert "vllm serve" not in md and "<th>vLLM</th>" not in html


def test_no_winner_says_so_and_lists_what_was_tried(tmp_path: Path) -> None:
    store, analysis = build_study(tmp_path, with_winner=False)
    paths = write_report(analysis, store, tmp_path / "report")
    md = paths["markdown"].read_text()
    assert "No config beat the baseline: 3 candidate config(s) tried, 1 failed" in md
    assert "Recommended config (the baseline: nothing beat it)" in md
    assert "max-num-batched-tokens=999999 | oom" in md
    assert "baseline:command" in paths and "winner:command" not in paths


def test_eta_accuracy_counts_running_time_only(tmp_path: Path) -> None:
    """A study resumed a day later did not take that day: the first ETA is judged against the
    time its sessions ran after the estimate, the gap between them left out."""
    store, analysis = build_study(tmp_path)
    first = store.sessions()[0]
    store._conn.execute("UPDATE sessions SET started_at = ?, ended_at = ?, last_seen = ?, end_reason = ? "
                        "WHERE id = ?", (first.started_at - 86_400, first.ended_at - 86_400 - 300,
                                         first.ended_at - 86_400 - 300, "interrupted", first.id))
    resumed = store.begin_session()
    store._conn.execute("UPDATE sessions SET started_at = started_at - 200 WHERE id = ?", (resumed,))
    store.end_session(resumed, "done")
    end = store.sessions()[-1].ended_at
    # predicted at the first session's start: 400 s remaining; it ran 300 s then, and 200 s a day later
    store.set_meta_json("eta_log", [{"trial_seq": 1, "at": first.started_at - 86_400,
                                     "predicted_end": first.started_at - 86_400 + 400.0},
                                    {"trial_seq": 3, "at": end - 100.0, "predicted_end": end - 50.0}])
    md = write_report(analysis, store, tmp_path / "report")["markdown"].read_text()
    assert "first ETA 6.7 min, actual 8.3 min of running time" in md       # 400 s vs 300 + 200 s
    assert "-20 %" in md                                                    # (400 - 500) / 500
    assert "median error over 2 estimates 35 %" in md                       # |-20| and |-50|


def test_an_interrupted_study_has_no_eta_error_yet(tmp_path: Path) -> None:
    """The first ETA was for the whole study: set against the time so far of a study whose last
    session was interrupted (a device call's time limit), it would read as a wrong estimate."""
    store, analysis = build_study(tmp_path)
    session = store.begin_session()
    store.end_session(session, "interrupted")
    md = write_report(analysis, store, tmp_path / "report")["markdown"].read_text()
    assert "ETA accuracy: study not finished (its last session was interrupted)." in md
    assert "the first estimate was off by" not in md


def test_templates_judge_outcomes_by_the_enum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The templates ask `Outcome.ok`, not the string 'ok': were the outcome renamed, the report
    would fail to render instead of listing every trial as failed."""
    store, analysis = build_study(tmp_path)
    data = context.build(analysis, store)
    renamed = StrEnum("Outcome", {("succeeded" if o is Outcome.ok else o.name): o.value for o in Outcome})
    monkeypatch.setattr(templating, "Outcome", renamed)
    with pytest.raises(jinja2.UndefinedError, match="ok"):
        render_markdown(data, {})
    with pytest.raises(jinja2.UndefinedError, match="ok"):
        render_html(data)
