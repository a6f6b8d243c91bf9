"""What `servetune capacity` shows while it searches: one row per level as it is judged (the
binding SLO's statistic with its interval, the verdict, the bracket and the capacity so far),
the run in progress under it; the same table stays on screen at the end."""

from __future__ import annotations

import math

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..capacity.estimate import FIT, CapacityEstimate, estimate
from ..capacity.levels import LevelResult
from ..capacity.probe import SaturationProbe
from ..capacity.search import SearchResult
from ..capacity.slo import Judgement, Verdict

_VERDICT = {Verdict.meets: ("met", "green"), Verdict.violates: ("violated", "red"),
            Verdict.undecided: ("undecided", "yellow")}


def unit(load: str) -> str:
    return {"rate": "req/s", "speedup": "x the recorded traffic"}.get(load, "concurrent requests")


def _bound(x: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else ("∞" if x > 0 else "-∞")


def binding(r: LevelResult) -> Judgement:
    """The SLO that decides the level: one it violates, else the one nearest its limit."""
    violated = [j for j in r.judgements if j.verdict is Verdict.violates]
    judged = [j for j in r.judgements if j.n]
    if violated or not judged:
        return (violated or r.judgements)[0]
    return max(judged, key=lambda j: j.high / j.slo.limit_ms if math.isfinite(j.high) else math.inf)


def why_short(stopped: str | None) -> str:
    """A run's early end in a word or two for the table (the JSON keeps the whole reason):
    `look 200`, `lost`, `saturated`."""
    if not stopped:
        return ""
    if " at look " in stopped:
        return "look " + stopped.split(" at look ")[1].split(":")[0].split("/")[0]
    return stopped.split(" ")[0].rstrip(":")


FIT_MARK = "~"   # before an end of the interval set by the fitted crossing, not by a level's verdict


def bracket_text(est: CapacityEstimate) -> str:
    low = (FIT_MARK if est.low_by == FIT else "") + f"{est.low:.3g}"
    high = (FIT_MARK if est.high_by == FIT else "") + ("∞" if not math.isfinite(est.high) else format(est.high, ".3g"))
    return f"[{low}, {high}]"


def levels_table(levels: list[LevelResult], load: str, integer: bool, alpha: float = 0.05) -> Table:
    """One row per level in the order measured; bracket and capacity as they stood after it."""
    slos = sorted({str(j.slo) for r in levels for j in r.judgements})
    what = "binding SLO's statistic" if len(slos) > 1 else (slos[0] if slos else "statistic")
    table = Table(title=escape(f"capacity search ({unit(load)}); {what} [interval] in ms"))
    several = len({str(j.slo) for r in levels for j in r.judgements}) > 1
    columns = [("#", True), (load, True), ("runs", True), ("judged", True), ("goodput (req/s)", True)]
    columns += [("binding SLO", False)] if several else []
    columns += [("statistic [interval]", True), ("verdict", False), ("bracket", True), ("capacity", True)]
    for name, right in columns:
        table.add_column(name, justify="right" if right else "left", no_wrap=True)
    fitted = False
    for i, r in enumerate(levels):
        j = binding(r)
        word, style = _VERDICT[r.verdict]
        why = f" ({why_short(r.stopped)})" if r.stopped else ""
        est = estimate(levels[:i + 1], integer=integer, alpha=alpha)
        fitted = fitted or FIT in (est.low_by, est.high_by)
        good = r.goodput(1 - alpha)
        cells: list[str | Text] = [str(i + 1), f"{r.level:.4g}", str(len(r.samples)), f"{r.completed}/{r.requests}",
                                   "-" if good is None else f"{good.estimate:.3g}"]
        cells += [escape(str(j.slo))] if several else []
        cells += [f"{j.estimate:.1f} [{_bound(j.low)}, {_bound(j.high)}]",
                  Text(word, style=style) + Text(why, style="dim"), bracket_text(est), f"{est.capacity:.3g}"]
        table.add_row(*cells)
    if fitted:
        table.caption = f"{FIT_MARK}: an end set by the fitted crossing of the levels near it"
    return table


class SearchView:
    """The live table of one search (a plain line per level where the output is not a terminal)."""

    def __init__(self, console: Console, load: str, integer: bool, alpha: float = 0.05) -> None:
        self.console, self.load, self.integer, self.alpha = console, load, integer, alpha
        self.levels: list[LevelResult] = []
        self.status = ""
        self.live = Live(self._render(), console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> SearchView:
        if self.console.is_terminal:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.status = ""
        if self.console.is_terminal:
            self.live.update(self._render(), refresh=True)
            self.live.stop()
        elif self.levels:
            self.console.print(levels_table(self.levels, self.load, self.integer, self.alpha))

    def _render(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self.levels:
            parts.append(levels_table(self.levels, self.load, self.integer, self.alpha))
        if self.status:
            parts.append(Text(self.status, style="dim"))
        return Group(*parts)

    def _refresh(self) -> None:
        if self.console.is_terminal:
            self.live.update(self._render(), refresh=True)

    def note(self, line: str) -> None:
        """A line that stays (the probe's result, a resume)."""
        if self.console.is_terminal:
            self.live.console.print(escape(line))
        else:
            self.console.print(escape(line))

    def probed(self, probe: SaturationProbe, start: float) -> None:
        self.note(f"probe: {probe.rate:.3g} req/s completed with {probe.users} users kept busy "
                  f"({probe.requests} requests, {probe.seconds:.1f} s); first level {start:.4g} {unit(self.load)}")

    def progress(self, level: float, run: int, done: int, total: int) -> None:
        self.status = f"level {level:.4g} {unit(self.load)}, run {run + 1}: {done}/{total} requests"
        self._refresh()

    def level_done(self, result: SearchResult) -> None:
        self.levels = list(result.levels)
        if not self.console.is_terminal:
            r = self.levels[-1]
            j = binding(r)
            est = estimate(self.levels, integer=self.integer, alpha=self.alpha)
            self.console.print(escape(
                f"level {r.level:.4g}: {r.completed}/{r.requests} judged, {j.slo} {j.estimate:.1f} "
                f"[{_bound(j.low)}, {_bound(j.high)}] {_VERDICT[r.verdict][0]}"
                + (f" ({r.stopped})" if r.stopped else "")
                + f"; bracket {bracket_text(est)}, capacity {est.capacity:.3g}"))
        self._refresh()
