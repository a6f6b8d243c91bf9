"""The soak's figure: each watched signal per window over time, one panel each (matplotlib Agg,
PNG bytes, as report/plots.py draws), the crash marked where there was one."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from ..report.plots import png
from .run import Crash, series
from .trend import SIGNALS
from .window import Window

_UNITS = {"ttft": "ms", "tpot": "ms", "rss": "MiB", "kv_cache_usage": "% (peak)", "preemptions": "per 100 req"}


def soak_plot(windows: Sequence[Window], crash: Crash | None, unstable: Sequence[str] = ()) -> bytes | None:
    """None when no window measured anything to draw."""
    data = {name: [(w.mid_hours * 60, v, w.scenario) for w, v in zip(windows, values, strict=True) if v is not None]
            for name, values in series(windows).items()}
    data = {name: points for name, points in data.items() if points}
    if not data:
        return None
    fig = Figure(figsize=(7.0, 2.2 * len(data)))
    axes = fig.subplots(len(data), 1, squeeze=False, sharex=True)
    scenarios = sorted({w.scenario for w in windows})
    for ax, (name, points) in zip((row[0] for row in axes), data.items(), strict=True):
        for scenario in scenarios:
            mine = [(t, v) for t, v, s in points if s == scenario]
            if mine:
                ax.plot(*zip(*mine, strict=True), marker="o", linewidth=1, label=scenario)
        title = f"{SIGNALS[name].label} ({_UNITS[name]})"
        ax.set_title(title + ("  [growing]" if name in unstable else ""), fontsize=9,
                     color="tab:red" if name in unstable else "black")
        if crash is not None:
            ax.axvline(crash.at_s / 60, color="tab:red", linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    axes[-1][0].set_xlabel("minutes from the start" + ("  (dashed: the crash)" if crash is not None else ""))
    return png(fig)
