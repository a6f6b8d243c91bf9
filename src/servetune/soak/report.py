"""The soak's short Markdown report: the verdict, the trends with their intervals, the crash's
evidence and log tail, the windows, and the figure beside it."""

from __future__ import annotations

from collections.abc import Sequence

from .duration import format_duration
from .run import SoakPlan, SoakRun
from .trend import SIGNALS, SoakAnalysis
from .window import Window


def _cell(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _windows_table(windows: Sequence[Window]) -> list[str]:
    lines = ["| window | scenario | start | outcome | requests | failed | TTFT ms | TPOT ms | RSS MiB | KV % | "
             "preempt/100 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in windows:
        lines.append(f"| {w.index} | {w.scenario} | {format_duration(w.start_s) if w.start_s else '0s'} | "
                     f"{w.outcome} | {w.requests} | {w.failed} | {_cell(w.ttft_ms, '.2f')} | "
                     f"{_cell(w.tpot_ms, '.2f')} | "
                     f"{_cell(w.rss_mib)} | {_cell(w.kv_cache_usage)} | {_cell(w.preemptions, '.2f')} |")
    return lines


def _change_unit(signal: str) -> str:
    sig = SIGNALS[signal]
    return "%" if sig.log or sig.relative else sig.unit


def soak_markdown(plan: SoakPlan, run: SoakRun, analysis: SoakAnalysis, target: str, plot_name: str | None) -> str:
    confidence = 1 - analysis.alpha
    status = " (interrupted: the windows below are what was kept)" if run.interrupted else ""
    out = [f"# Soak of {target}", "",
           f"**Verdict: {analysis.verdict}**{status}", "", analysis.line(), "",
           f"{len(run.windows)} windows of up to {format_duration(plan.window_s)} over "
           f"{format_duration(run.seconds)} (asked: {format_duration(plan.duration_s)}); scenarios in turn: "
           f"{', '.join(sc.name for sc in plan.scenarios)}.", ""]
    if analysis.trends:
        out += ["## Trends", "", f"Slope over the windows with one offset per scenario, "
                f"{confidence:.0%} CI, Holm across signals.", "",
                "| signal | slope | change over the soak | p (Holm) | growing |", "|---|---|---|---|---|"]
        for t in analysis.trends:
            out.append(f"| {t.signal} | {t.slope_text()} | "
                       f"{t.change:+.3g} [{t.change_low:+.3g}, {t.change_high:+.3g}] {_change_unit(t.signal)} | "
                       f"{t.p_adjusted:.2g} | "
                       f"{'yes' if t.growing else 'no'} |")
        out.append("")
    if run.crash is not None:
        c = run.crash
        out += ["## Crash", "", f"{c.line()} (outcome {c.outcome}).", ""]
        if c.evidence:
            out += ["Evidence:", "", *(f"- `{line}`" for line in c.evidence), ""]
        if c.log_tail:
            out += ["Log tail:", "", "```", c.log_tail, "```", ""]
    if plot_name:
        out += [f"![signals per window]({plot_name})", ""]
    out += ["## Windows", "", *_windows_table(run.windows), ""]
    return "\n".join(out)
