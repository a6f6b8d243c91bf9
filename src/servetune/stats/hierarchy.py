"""Boots nested in configs: a two-level model of positive measurements on the log scale.

A value measured on replicate r of boot j of config i is modelled as
``log y = mu_i + b_ij + e_ijr`` with boot effects ``b ~ N(0, boot_var)`` and replicate noise
``e ~ N(0, rep_var)``. Replicates on one boot share its luck (placement, compile, thermal state),
so a config's mean is only as good as its number of boots: comparing replicates of a single boot
ignores ``boot_var`` and gives false certainty. Both components are estimated from the whole study
(every config booted more than once, the baseline's re-measurements included) and then used for
every config, also those booted once. Working on the log scale makes effects ratios, and keeps every
interval of a throughput or a time positive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from servetune.stats._validate import check_confidence
from servetune.stats.types import Comparison

# Per config, per boot, the replicate values: groups[config][boot][replicate].
Boots = Sequence[Sequence[float]]


@dataclass(frozen=True)
class VarianceComponents:
    """Variances on the natural-log scale (so sqrt(var) is about a relative spread).

    ``boot_df`` counts boot-level degrees of freedom: sum over configs of (boots - 1); 0 means no
    config was booted twice and ``boot_var`` is unknown (NaN).
    """

    boot_var: float
    rep_var: float
    boot_df: int
    rep_df: int
    boot_mean_var: float = math.nan   # pooled variance of boot means within configs (boot_var + rep noise)
    mean_inv_reps: float = math.nan   # mean 1/replicates of the boots behind boot_mean_var

    @property
    def known(self) -> bool:
        """The boot variance was measured (with single-replicate boots, rep noise is inside it)."""
        return self.boot_df > 0


def _logs(boot: Sequence[float]) -> np.ndarray:
    x = np.asarray(boot, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"two-level model needs positive finite replicate values, got {list(boot)!r}")
    logs: np.ndarray = np.log(x)
    return logs


def variance_components(groups: Sequence[Boots]) -> VarianceComponents:
    """Method-of-moments (one-way ANOVA per level) estimates from every config's boots.

    rep_var: pooled within-boot variance of every boot with >= 2 replicates. boot_var: pooled
    within-config variance of boot means (configs with >= 2 boots) minus the replicate noise
    those means carry (rep_var / replicates), floored at 0.
    """
    rep_ss, rep_df = 0.0, 0
    boot_ss, boot_df, inv_reps = 0.0, 0, []
    for config in groups:
        means = []
        for boot in config:
            x = _logs(boot)
            if x.size == 0:
                continue
            if x.size >= 2:
                rep_ss += float(((x - x.mean()) ** 2).sum())
                rep_df += x.size - 1
            means.append(float(x.mean()))
            if len(config) >= 2:
                inv_reps.append(1.0 / x.size)
        if len(means) >= 2:
            m = np.array(means)
            boot_ss += float(((m - m.mean()) ** 2).sum())
            boot_df += m.size - 1
    rep_var = rep_ss / rep_df if rep_df else math.nan
    if not boot_df:
        return VarianceComponents(math.nan, rep_var, 0, rep_df)
    boot_mean_var = boot_ss / boot_df
    mean_inv = float(np.mean(inv_reps))
    noise = rep_var * mean_inv if rep_df else 0.0
    return VarianceComponents(max(boot_mean_var - noise, 0.0), rep_var if rep_df else 0.0, boot_df, rep_df,
                              boot_mean_var, mean_inv)


def _mean_and_var(boots: Boots, c: VarianceComponents) -> tuple[float, float, float, float]:
    """A config's mean of boot means (log scale), its variance, and that variance's split into
    the coefficients of the boot-mean variance and of rep_var (for Satterthwaite's df)."""
    logs = [_logs(b) for b in boots if len(b)]
    k = len(logs)
    mean = float(np.mean([x.mean() for x in logs]))
    inv = [1.0 / x.size for x in logs]
    boot_var = c.boot_var if c.boot_df else 0.0
    var = (k * boot_var + c.rep_var * sum(inv)) / k**2
    # var written as A * boot_mean_var + B * rep_var, with boot_var = boot_mean_var - rep_var * mean_inv_reps
    a = 1.0 / k if c.boot_df else 0.0
    b = sum(inv) / k**2 - (a * c.mean_inv_reps if c.boot_df else 0.0)
    return mean, var, a, b


def log_mean_se(boots: Boots, components: VarianceComponents) -> float:
    """Standard error of a config's mean of boot means of the logs under the pooled components:
    its interval rests on the study's boot-level df, not on its own two or three boots."""
    return math.sqrt(_mean_and_var(boots, components)[1])


def log_difference(baseline: Boots, candidate: Boots, components: VarianceComponents) -> tuple[float, float]:
    """Candidate minus baseline in mean of boot means of the logs, and its standard error under the
    pooled components: the statistic ``compare_boots`` tests, ``d / se``."""
    mb, vb, _, _ = _mean_and_var(baseline, components)
    mc, vc, _, _ = _mean_and_var(candidate, components)
    return mc - mb, math.sqrt(vb + vc)


def compare_boots(
    baseline: Boots,
    candidate: Boots,
    components: VarianceComponents,
    *,
    higher_is_better: bool,
    confidence: float = 0.95,
) -> Comparison:
    """Candidate versus baseline on the log scale with boot and replicate variance.

    Effect: the ratio of geometric means (mean of boot means of the logs) in %, its CI
    ``exp(d ± t * se) - 1`` (never below -100 %), a two-sided t-test. ``se`` counts ``boot_var``
    once per boot of each side, so a candidate measured on one boot carries a whole boot's luck.
    df: Satterthwaite's, from the boot-level and replicate-level degrees of freedom the variance
    estimate rests on; when boot_var was floored at 0 the boot-level df alone (conservative).
    ``n_*`` count boots. Without a known boot variance the comparison rests on replicates only
    (say so: ``test`` is then ``log-t(replicates)``).
    """
    confidence = check_confidence(confidence)
    if not components.rep_df and not components.boot_df:
        raise ValueError("variance components are unknown: no boot has two replicates and no config two boots")
    mb, vb, ab, bb = _mean_and_var(baseline, components)
    mc, vc, ac, bc = _mean_and_var(candidate, components)
    var = vb + vc
    if components.boot_df and components.boot_var > 0:
        a, b = ab + ac, bb + bc
        terms = (a * components.boot_mean_var) ** 2 / components.boot_df
        terms += (b * components.rep_var) ** 2 / components.rep_df if components.rep_df else 0.0
        df = var**2 / terms if terms > 0 else math.inf
        test = "two-level-t"
    elif components.boot_df:
        df, test = float(components.boot_df), "two-level-t"
    else:
        df, test = float(components.rep_df), "log-t(replicates)"
    d = mc - mb
    if var > 0:
        se = math.sqrt(var)
        p = float(2.0 * sps.t.sf(abs(d) / se, df))
        t_crit = float(sps.t.ppf(0.5 + confidence / 2.0, df))
        low, high = d - t_crit * se, d + t_crit * se
    else:
        p = 1.0 if d == 0 else 0.0
        low = high = d
    return Comparison(
        effect_pct=100.0 * math.expm1(d), ci_low_pct=100.0 * math.expm1(low),
        ci_high_pct=100.0 * math.expm1(high), p_value=p,
        baseline_mean=math.exp(mb), candidate_mean=math.exp(mc),
        n_baseline=len(baseline), n_candidate=len(candidate), test=test,
        higher_is_better=higher_is_better, confidence=confidence, statistic="geomean",
    )
