"""The jinja2 environment and number formats shared by the Markdown and HTML renderers."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import jinja2

from ..analysis.types import ClassStat, Effect, Estimate, SloCheck
from ..vocabulary import Outcome


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return "–"
    return f"{x:,.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"


_BOUND = {"right": "≥ ", "left": "≤ "}   # censored: the value is a lower / an upper bound


def estimate(e: Estimate | None) -> str:
    if e is None:
        return "–"
    mark = _BOUND.get(e.censored, "")
    if _finite(e.low) and _finite(e.high) and not e.censored:
        return f"{num(e.estimate)} [{num(e.low)}, {num(e.high)}]"
    return mark + num(e.estimate) + (" (censored both ways)" if e.censored == "both" else "")


def effect(e: Effect | None) -> str:
    if e is None or not _finite(e.effect_pct):
        return "–"
    if e.censored in ("right", "left"):   # a bound: only its own side of the interval holds
        side = e.ci_low_pct if e.censored == "right" else e.ci_high_pct
        end = f" ({'lower' if e.censored == 'right' else 'upper'} bound {side:+.1f})" if _finite(side) else ""
        return f"{_BOUND[e.censored]}{e.effect_pct:+.1f} %{end}"
    ci = f" [{e.ci_low_pct:+.1f}, {e.ci_high_pct:+.1f}]" if _finite(e.ci_low_pct) and _finite(e.ci_high_pct) else ""
    return f"{e.effect_pct:+.1f} %{ci}"


def _end(x: float) -> str:
    return "∞" if x == math.inf else "−∞" if x == -math.inf else num(x)


def slo_interval(c: SloCheck) -> str:
    """An SLO's statistic with its interval: `5,120 [4,800, ∞]` (an unbounded side: too few values)."""
    if c.basis == "capacity":
        return num(c.estimate)
    return stat_interval(c)


def stat_interval(s: SloCheck | ClassStat) -> str:
    """A statistic with its interval, `5,120 [4,800, ∞]`; `–` without a value."""
    if not _finite(s.estimate):
        return "–"
    if math.isnan(s.low) or math.isnan(s.high):
        return num(s.estimate)
    return f"{num(s.estimate)} [{_end(s.low)}, {_end(s.high)}]"


def pvalue(e: Effect | None) -> str:
    if e is None:
        return "–"
    p = e.p_adjusted if e.p_adjusted is not None else e.p_value
    return "–" if not _finite(p) else f"{p:.3g}"


def verdict(e: Effect | None) -> str:
    if e is None:
        return "–"
    return _VERDICT_TEXT.get(e.verdict, e.verdict)


# A single-boot config is screened, not judged: its labels say "re-validate", not "better".
_VERDICT_TEXT = {"better": "better", "worse": "worse", "no_difference": "no detectable difference",
                 "promising": "promising (one boot)", "not_promising": "not promising (one boot)"}


def seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def pct(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.0f} %"


def share(part: float, whole: float) -> str:
    return "–" if not whole else f"{100 * part / whole:.0f} %"


def when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def md_cell(text: Any) -> str:
    """A Markdown table cell: pipes escaped, newlines folded."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("servetune.report", "templates"),
        autoescape=autoescape, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(num=num, est=estimate, eff=effect, pval=pvalue, verdict=verdict, secs=seconds, pct=pct,
                       when=when, md=md_cell, slo=slo_interval, stat=stat_interval)
    # Templates compare with `Outcome.ok`, never the string: a renamed outcome fails the render (StrictUndefined).
    env.globals.update(share=share, Outcome=Outcome)
    return env
