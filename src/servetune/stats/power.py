"""Power of a boot-aware comparison, before a study spends its boots."""

from __future__ import annotations

import math

from scipy import stats as sps

from servetune.stats.hierarchy import VarianceComponents


def _se(c: VarianceComponents, replicates: int, boots: int, baseline_boots: int) -> float:
    per_boot = c.boot_var + c.rep_var / replicates
    return math.sqrt(per_boot / boots + per_boot / baseline_boots)


def detectable_effect_pct(c: VarianceComponents, *, replicates: int, boots: int, baseline_boots: int | None = None,
                          alpha: float = 0.05, power: float = 0.9) -> float:
    """Smallest true effect (in %, an improvement) that ``compare_boots`` detects with ``power`` at ``alpha``
    when the candidate has ``boots`` boots of ``replicates`` replicates and the baseline
    ``baseline_boots`` (default: as many) of the same.

    t quantiles at the df the comparison would have: the study's boot-level df plus the candidate's
    boots beyond one (the baseline's measured boots are in the study's df already). At 2 df the
    normal quantiles this used before understated the detectable effect almost twofold.
    """
    if not c.known:
        return math.nan
    base = baseline_boots or boots
    se = _se(c, replicates, boots, base)
    df = c.boot_df + max(boots - 1, 0)
    return 100.0 * math.expm1((sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(power, df)) * se)


def boots_needed(c: VarianceComponents, *, effect_pct: float = 10.0, replicates: int, alpha: float = 0.05,
                 power: float = 0.9, max_boots: int = 1000) -> int | None:
    """Fewest boots per side (candidate and baseline alike) to detect ``effect_pct``; None beyond ``max_boots``
    or when the variances are unknown."""
    if not c.known:
        return None
    for boots in range(1, max_boots + 1):
        if detectable_effect_pct(c, replicates=replicates, boots=boots, alpha=alpha, power=power) <= effect_pct:
            return boots
    return None
