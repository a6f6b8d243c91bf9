"""The A/B on the terminal (a rich table) and as a Markdown report section."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

from ..stats.types import Interval
from .analysis import TARGET_EFFECT_PCT, AbAnalysis, AbRow, ReuseSide
from .config_diff import ConfigDiff, Difference
from .spec import SIDES

_VERDICT_STYLE = {"better": "bold green", "worse": "bold red", "promising": "green", "not_promising": "red"}
COLUMNS = ("scenario", "metric", "A", "B", "B vs A", "p (Holm)", "verdict for B",
           f"boots a side for ±{TARGET_EFFECT_PCT:g} %")


def _num(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"


def _cells(row: AbRow) -> list[str]:
    c = row.comparison
    if c is None:
        return [row.scenario, row.metric, "-", "-", "-", "-", row.note or row.verdict, "-"]
    effect = f"{c.effect_pct:+.1f} % [{c.ci_low_pct:+.1f}, {c.ci_high_pct:+.1f}]"
    return [row.scenario, row.metric, _num(c.baseline_mean), _num(c.candidate_mean), effect,
            f"{row.adjusted_p:.3g}", row.verdict, "?" if row.boots_for_target is None else str(row.boots_for_target)]


def _interval(x: Interval, unit: str = "") -> str:
    return f"{_num(x.estimate)}{unit} [{_num(x.low)}, {_num(x.high)}]"


def reuse_line(r: ReuseSide) -> str:
    return (f"{r.side}: warm/cold TTFT {_interval(r.ratio)} over {r.ratio.n} pairs (cold {_interval(r.cold_ms, ' ms')},"
            f" warm {_interval(r.warm_ms, ' ms')})")


def _side_line(result: AbAnalysis, side: str) -> str:
    versions = ", ".join(result.versions.get(side, [])) or "version not in the boot log"
    return (f"{side}: `{result.commands[side]}` ({result.engine_label(side)} {versions}), "
            f"{result.measured_boots(side)} measured boot(s)")


def terminal_table(result: AbAnalysis) -> Table:
    table = Table(title=escape(f"A/B: B against A, intervals at {1 - result.alpha:.0%}, geometric means over boots"))
    for col in COLUMNS:
        table.add_column(col)
    for row in result.rows:
        cells = [escape(x) for x in _cells(row)]
        style = _VERDICT_STYLE.get(row.verdict)
        if style:
            cells[6] = f"[{style}]{cells[6]}[/]"
        table.add_row(*cells)
    return table


CONFIG_COLUMNS = ("source", "what", "A", "B", "set by (study parameter)")
_TERMINAL_CELL = 100  # a warning's text is cut here on the terminal; ab.md keeps it whole


def _config_cells(d: Difference) -> list[str]:
    return [d.source, d.what, d.a, d.b, d.flag or "-"]


def config_table(diff: ConfigDiff) -> Table:
    table = Table(title=f"What differs between A and B: {len(diff.differences)} difference(s) in the resolved "
                        "configuration")
    for col in CONFIG_COLUMNS:
        table.add_column(col, overflow="fold")
    for d in diff.differences:
        table.add_row(*(escape(c if len(c) <= _TERMINAL_CELL else c[:_TERMINAL_CELL - 1] + "…")
                        for c in _config_cells(d)))
    return table


def config_markdown(diff: ConfigDiff) -> list[str]:
    out = ["### What differs between A and B", "",
           "Each side's first boot log (resolved values, the engine config line, the non-default args it "
           "parsed), its engine's argument defaults (read with its own interpreter), and WARNING lines "
           "logged on every boot of one side and none of the other (pids, ports, times, paths and hashes "
           "normalised). `set by`: the flag that sets it, as a study file's `space` names it (a JSON flag's "
           "field as `FLAG.field`); `servetune ab --explain OUT.yaml` writes a study that boots the newer "
           "version with each of them set back to the older side's value.", ""]
    out += [f"- {n}" for n in diff.notes]
    if diff.notes:
        out.append("")
    if not diff.differences:
        return [*out, "Nothing differs in what was compared."]
    out += ["| " + " | ".join(CONFIG_COLUMNS) + " |", "|" + " --- |" * len(CONFIG_COLUMNS)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in _config_cells(d)) + " |" for d in diff.differences]
    return out


def terminal_lines(result: AbAnalysis) -> list[str]:
    """Plain lines (no markup) printed after the table."""
    notes = [f"configuration: {n}" for n in result.config.notes]
    return [*(_side_line(result, s).replace("`", "") for s in SIDES), *(reuse_line(r) for r in result.reuse),
            *notes, f"verdict: {result.headline}"]


def markdown(result: AbAnalysis) -> str:
    out = ["## Upgrade A/B", "", f"**{result.headline}**", ""]
    out += [f"- {_side_line(result, s)}" for s in SIDES]
    out += [f"- machine: {line}" for line in result.machines]
    out += ["", f"Boots alternate A B A B ...; each boot measures every scenario with its replicates. B against A "
            f"per scenario and metric in the two-level model (boots nested in engines, log scale), intervals at "
            f"{1 - result.alpha:.0%}, p-values Holm-corrected over the whole table; `better`/`worse` need two boots a "
            f"side and an effect of at least {result.min_effect_pct:g} %. The last column: boots a side that would "
            f"detect a {TARGET_EFFECT_PCT:g} % change with 90 % power at the variances measured here (`?`: unknown "
            "or over 1000).", ""]
    out += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    out += ["| " + " | ".join(x.replace("|", "\\|") for x in _cells(r)) + " |" for r in result.rows]
    out += ["", *config_markdown(result.config)]
    if result.reuse:
        out += ["", "### Prefix cache: cold versus warm", "",
                "A long prompt sent, then the identical prompt sent again (as agents re-send their context); "
                "the ratio is the warm send's TTFT over the cold one's, pair by pair.", ""]
        out += [f"- {reuse_line(r)}" for r in result.reuse]
    engines = " / ".join(dict.fromkeys(result.engine_label(s) for s in SIDES))
    out += ["", "### Boots", "", f"| # | side | {engines} | outcome | boot s | runs |",
            "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {b.seq} | {b.side} | {b.version or '?'} | {b.outcome} | "
            f"{'-' if b.boot_s is None else f'{b.boot_s:.0f}'} | {b.runs} |" for b in result.boots]
    return "\n".join(out) + "\n"
