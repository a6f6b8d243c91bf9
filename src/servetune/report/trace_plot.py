"""The figure of `servetune trace`: arrivals per minute over the trace (a chosen window shaded)
and the prompt and answer length distributions, in the report's style (plots.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from ..load.trace.rows import TraceRow
from ..load.trace.summary import TraceSummary
from .plots import png


def trace_overview(rows: Sequence[TraceRow], summary: TraceSummary, title: str,
                   window: tuple[float, float] | None = None) -> bytes:
    """PNG bytes; `window`: (start_s, duration_s) to shade on the arrival panel."""
    fig = Figure(figsize=(12.6, 3.2))
    rate_ax, in_ax, out_ax = fig.subplots(1, 3)
    minutes = np.arange(len(summary.per_minute))
    rate_ax.step(minutes, np.asarray(summary.per_minute) / 60.0, where="post")
    rate_ax.axhline(summary.mean_rate, linestyle="--", linewidth=0.8, color="grey", label="mean")
    if window is not None:
        start, length = window
        rate_ax.axvspan(start / 60.0, (start + length) / 60.0, alpha=0.2, color="tab:orange", label="window")
    rate_ax.set_xlabel("minute of the trace", fontsize=8)
    rate_ax.set_ylabel("arrivals (req/s, per minute)", fontsize=8)
    rate_ax.set_title(f"{title}: arrival rate", fontsize=9)
    rate_ax.legend(fontsize=7)
    for ax, values, name in ((in_ax, [r.input_len for r in rows], "prompt"),
                             (out_ax, [r.output_len for r in rows], "answer")):
        data = np.asarray(values, dtype=np.float64)
        bins = np.logspace(0, np.log10(max(data.max(), 10.0)), 40)
        ax.hist(data, bins=bins)
        ax.set_xscale("log")
        ax.set_xlabel(f"{name} tokens", fontsize=8)
        ax.set_ylabel("requests", fontsize=8)
        ax.set_title(f"{name} length (p50 {np.percentile(data, 50):,.0f}, p99 {np.percentile(data, 99):,.0f})",
                     fontsize=9)
    for ax in (rate_ax, in_ax, out_ax):
        ax.tick_params(labelsize=7)
    return png(fig)
