"""Re-validation until decided: after the finalists' first fresh boots, whether the leading
finalist and the baseline are booted once more, and what that boot pair would buy.

The leader is the finalist with the largest t. It is booted again (with a baseline boot on the
same slot) while it is neither proven better (a winner) nor ruled out, and it has fewer boots than
the study's cap (`revalidation.max_boots`). Ruled out: its interval lies under the minimum effect,
or even at the effect measured so far the boots left up to the cap would decide it better with
less than `FUTILITY_POWER` chance. Stopping for futility never raises the false-winner rate: the
critical value already counts every look up to the cap (stats/pipeline.py).

A finalist with an SLO violated (its interval wholly outside the limit) is out. One proven better
whose SLO is still unproven is not a winner: it is booted again while the cap allows, since each
boot pair adds requests to the pooled interval its SLO is judged by (analysis/slo_proof.py), unless
even the cap's boots would measure too few requests to bound that percentile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..capacity.slo import requests_to_meet
from ..stats.pipeline import detection_power
from ..study.spec import StudySpec
from . import slo_proof
from .types import SloCheck, SloState, StudyAnalysis

FUTILITY_POWER = 0.10


@dataclass(frozen=True)
class NextLook:
    """The decision after a look: boot `key` and the baseline again, or stop (key None), and why."""

    key: str | None
    why: str
    leader: str | None = None       # the leading finalist's label
    boots: int = 0                  # its boots so far
    cap: int = 0
    power_next: float = math.nan    # chance the next pair decides it better, at the effect measured
    power_cap: float = math.nan     # the same with every boot the cap allows

    def line(self) -> str:
        """One line for `status`, the display and the report."""
        if self.leader is None:
            return f"re-validation: {self.why}"
        chances = (f"; the next boot pair would prove it better with chance {self.power_next:.0%}, "
                   f"boots up to the cap {self.power_cap:.0%} (at the effect measured so far)"
                   if math.isfinite(self.power_next) else "")
        action = "boots it and the baseline again" if self.key else "stops"
        return (f"re-validation: leader {self.leader} at {self.boots} of {self.cap} boot(s), {self.why}; "
                f"the study {action}{chances}")


def next_look(result: StudyAnalysis, spec: StudySpec, cap: int) -> NextLook:
    """What re-validation does next for this analysis (a pure function of the store's contents)."""
    if spec.finalists == 0:
        return NextLook(None, "finalists: 0, nothing is re-validated")
    if result.winner is not None:
        return NextLook(None, f"decided: {result.winner.label} is better than the baseline")
    judged = [c for c in result.configs if c.is_finalist and c.feasible and c.objective_effect is not None
              and c.objective_effect.unit == "boot" and math.isfinite(c.objective_effect.t)]
    if not judged or result.baseline is None:
        return NextLook(None, "no finalist judged boot against boot")
    leader = max(judged, key=lambda c: c.objective_effect.t if c.objective_effect else -math.inf)
    eff = leader.objective_effect
    assert eff is not None
    boots, base_boots = len(leader.objective_boots), len(result.baseline.objective_boots)
    d = math.log1p(eff.effect_pct / 100.0)
    se = d / eff.t if eff.t else math.nan
    more = max(cap - boots, 0)
    now = (boots, base_boots)
    power_next = detection_power(d, se, now, (boots + 1, base_boots + 1), eff.df, eff.level)
    power_cap = detection_power(d, se, now, (boots + more, base_boots + more), eff.df, eff.level)
    look = NextLook(None, "", leader.label, boots, cap, power_next, power_cap)
    if eff.verdict == "better" and leader.slo_state is not SloState.met:
        # (the chances of proving it better are beside the point: it is)
        open_slos = "; ".join(c.text() for c in leader.slo_checks if c.state is not SloState.met)
        if boots >= cap:
            return NextLook(None, f"better, but an SLO is unproven at the cap (revalidation.max_boots: {cap}): "
                                  f"{open_slos}", leader.label, boots, cap)
        short = _unprovable(leader.slo_checks, boots, cap, spec.alpha)
        if short:
            return NextLook(None, f"better, but an SLO cannot be proven within the cap: {short}",
                            leader.label, boots, cap)
        return NextLook(leader.key, f"better at {eff.effect_pct:+.1f} %, but an SLO is unproven: {open_slos}",
                        leader.label, boots, cap)
    if boots >= cap:
        return _with(look, None, f"undecided at the cap (revalidation.max_boots: {cap})")
    if eff.ci_high_pct < spec.min_effect_pct:
        return _with(look, None, f"ruled out: its interval ends at {eff.ci_high_pct:+.1f} %, under the "
                                 f"minimum effect {spec.min_effect_pct:g} %")
    if not power_cap >= FUTILITY_POWER:
        return _with(look, None, f"ruled out: even at its measured {eff.effect_pct:+.1f} % the boots up to the cap "
                                 f"would prove it better with chance {power_cap:.0%} only")
    return _with(look, leader.key, f"undecided at {eff.effect_pct:+.1f} % "
                                   f"[{eff.ci_low_pct:+.1f}, {eff.ci_high_pct:+.1f}]")


def _unprovable(checks: list[SloCheck], boots: int, cap: int, alpha: float) -> str:
    """An unproven percentile SLO whose requests, at this many a boot, stay too few at the cap to
    bound it even if they were independent (capacity/slo.py `requests_to_meet`): more boots of the
    leader cannot make it a winner. Empty when every unproven SLO may still be proven."""
    for c in checks:
        slo = slo_proof.percentile_slo(c.metric, c.limit)
        need = requests_to_meet(slo, alpha) if slo is not None and c.basis == "requests" else None
        if c.state is SloState.unproven and need is not None and c.n * cap < need * boots:
            return (f"{c.scenario} {c.metric} needs at least {need} requests, {cap} boot(s) measure about "
                    f"{c.n * cap // boots}")
    return ""


def _with(look: NextLook, key: str | None, why: str) -> NextLook:
    return NextLook(key, why, look.leader, look.boots, look.cap, look.power_next, look.power_cap)

