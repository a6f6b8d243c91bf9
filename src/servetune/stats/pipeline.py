"""The finalist test, calibrated for the selection: the null of the whole screen -> finalists ->
re-validation -> verdict pipeline, simulated for the design a study actually ran.

A study screens m candidates on one boot each, re-validates the best k (those whose screening
estimate beats the baseline) on fresh boots, reuses their screening boot in the verdict, and may
boot the leading finalist and the baseline again, pair after pair, until it is decided
(``extra_looks``). Testing each finalist at a plain t critical value ignores that it was picked
for its lucky screening boot; Holm over all m pays for tests that cannot succeed. Instead the
statistic of the verdict, ``T = (mean log finalist - mean log baseline) / se`` with the study's
boot-level pooled variance (``hierarchy.compare_boots``), is simulated under the global null
(every candidate as good as the baseline) through the same selection, variance pooling and looks.
Each T is read as its nominal one-sided p at the boot-level df it has (``t.sf(T, df)``: the df
grow with every look and differ with the number of finalists), and the critical level is the
alpha quantile of the smallest nominal p any finalist reaches at any look. A winner is named when
a finalist's nominal p is at or under it: the false-winner rate is alpha for this design, spent in
full rather than a fraction of it. One nominal level at every look is a Pocock-type
group-sequential boundary on the p scale; stopping early for futility only lowers the rate.

With one value a boot T is studentised by a variance of the same boots, so its null does not
depend on the unknown boot variance. With replicates it depends on the ratio of replicate to boot
variance (``sd_ratio``), and the critical value is largest at ratio 0, where it equals the
one-value-a-boot design's: analysis/verdict_rule.py uses that least favourable value (a plug-in of
the ratio a study estimates from 2-3 boot-level df is not valid). Replicate noise enters as its
sufficient statistic: under normality the pooled within-boot sum of squares is
``rep_var * chi2(rep_df)``, independent of the boot means.

Simulations are seeded by the design and cached: the same design gives the same critical value,
in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr, stdtr, stdtrit

SIMULATIONS = 50_000
_MAX_SD_RATIO = 100.0    # a boot variance estimated at 0: the replicate noise is all there is


@dataclass(frozen=True)
class Design:
    """What a study ran, as far as the verdict's null distribution depends on it."""

    screened: int                  # m: candidates measured on one screening boot each
    finalists: int = 2             # k: the most finalists re-validated
    baseline_screen_boots: int = 1  # the baseline's boots before the finalists were picked
    fresh_boots: int = 1           # fresh boots per finalist, each paired with a baseline boot
    extra_looks: int = 0           # further (leader, baseline) boot pairs until decided: the looks - 1
    replicates: int = 1            # per boot
    sd_ratio: float = 0.0          # replicate sd / boot sd (log scale); 0 with one replicate

    def key(self) -> tuple[int, int, int, int, int, int, float]:
        """Hashable, with the ratio rounded so that nearby estimates share a simulation."""
        ratio = 0.0 if self.replicates <= 1 else float(f"{min(max(self.sd_ratio, 0.0), _MAX_SD_RATIO):.2g}")
        reps = max(self.replicates, 1) if ratio > 0 else 1    # without replicate noise replicates change nothing
        return (max(self.screened, 1), max(self.finalists, 1), max(self.baseline_screen_boots, 1),
                max(self.fresh_boots, 1), max(self.extra_looks, 0), reps, ratio)


def null_min_p(design: Design, simulations: int = SIMULATIONS) -> NDArray[np.float64]:
    """Sorted draws of the smallest nominal p of any finalist at any look, under the global null (1
    where no candidate beat the baseline's screening estimate: no finalist, no winner). Seeded by
    the design, so the same design always gives the same draws."""
    return _null_min_p(design.key(), simulations)


def critical_level(design: Design, alpha: float, simulations: int = SIMULATIONS) -> float:
    """The nominal one-sided p a finalist must reach for a winner: the alpha quantile of ``null_min_p``,
    taken two Monte-Carlo standard errors low so that the simulation's own error does not push the
    false-winner rate over alpha (at 50,000 draws: the 4.8 % quantile for alpha 5 %)."""
    draws = null_min_p(design, simulations)
    margin = 2.0 * math.sqrt(alpha * (1.0 - alpha) / draws.size)
    return float(np.quantile(draws, max(alpha - margin, 0.0), method="lower"))


def critical_t(level: float, df: float) -> float:
    """The T that reaches the nominal ``level`` at ``df`` boot-level degrees of freedom."""
    return float(stdtrit(df, 1.0 - level)) if df > 0 else math.inf


def calibrated_p(t: float, df: float, design: Design, simulations: int = SIMULATIONS) -> float:
    """P(smallest nominal p <= this one's) under the null of this design: the finalist's
    selection-aware p-value. Used for either sign: a finalist was picked for looking better, so
    for looking worse it is conservative."""
    if math.isnan(t) or not df > 0:
        return math.nan
    draws = null_min_p(design, simulations)
    nominal = float(stdtr(df, -abs(t)))
    below = int(np.searchsorted(draws, nominal, side="right"))
    # The same margin as critical_level's: p <= alpha exactly when the nominal p reaches it.
    share = (below + 1) / (draws.size + 1)
    return min(share + 2.0 * math.sqrt(share * (1.0 - share) / draws.size), 1.0)


@lru_cache(maxsize=256)
def _null_min_p(key: tuple[int, int, int, int, int, int, float], simulations: int) -> NDArray[np.float64]:
    m, k, b0, fresh, extra, reps, ratio = key
    rng = np.random.default_rng([*key[:6], int(ratio * 1000), simulations])
    return np.sort(simulate(rng, m=m, k=k, b0=b0, fresh=fresh, extra=extra, reps=reps,
                            sd_ratio=ratio, effects=np.zeros(m), n=simulations).min_p)


@dataclass(frozen=True)
class Simulated:
    """Per simulated study: the smallest nominal p of a finalist over the looks it ran and which
    candidate reached it (-1: none)."""

    min_p: NDArray[np.float64]
    who: NDArray[np.int64]


def simulate(rng: np.random.Generator, *, m: int, k: int, b0: int, fresh: int, extra: int, reps: int,
             sd_ratio: float, effects: NDArray[np.float64], n: int,
             critical: float | None = None, futility_power: float = 0.10,
             screen_ratio: float | None = None, race: Race | None = None) -> Simulated:
    """Run ``n`` studies of the pipeline with the candidates' true log effects ``effects`` (boot sd 1).

    Looks: after the fixed re-validation, the finalist with the largest T and the baseline get one
    boot each, ``extra`` times; T of every finalist is taken at every look. With ``critical`` (a
    nominal level) a study stops as the runner does (analysis/revalidation.py): once decided, or when
    even at its leader's measured effect the boots up to the cap would decide it with less than
    ``futility_power`` chance. Without it every study runs every look (the null's calibration:
    stopping early can only lower the false-winner rate).

    Short screening (analysis/screening.py): the search's boots, the baseline's among them, have
    ``screen_ratio`` (replicate sd / boot sd of a shorter run) instead of ``sd_ratio``. Racing
    (tune/racing.py, ``race``): after each replicate but the last a screening candidate whose
    interval lies below the baseline's by the margin stops, keeps its mean so far, and is no
    finalist."""
    boot_sd = math.sqrt(1.0 + sd_ratio**2 / reps)         # sd of a boot's mean of replicates
    screen_ratio = sd_ratio if screen_ratio is None else screen_ratio
    screen_sd = math.sqrt(1.0 + screen_ratio**2 / reps)
    rows = np.arange(n)
    stopped = np.zeros((n, m), dtype=bool)
    reps_lost = np.zeros(n)
    if race is None:
        screen = effects[None, :] + screen_sd * rng.standard_normal((n, m))
        first = screen_sd * rng.standard_normal((b0, n))
    else:
        first = screen_sd * rng.standard_normal((b0, n))
        screen, stopped, reps_lost = race.screen(rng, effects, first.mean(axis=0), b0, screen_ratio, reps, n)
    # The baseline's boots as running sums (sum, sum of squares, count): each look is O(n k).
    base = _Sums(first.sum(axis=0), (first**2).sum(axis=0), np.full(n, float(b0)))
    ranked = np.where(stopped, -np.inf, screen)            # a stopped candidate is no finalist
    order = np.argsort(-ranked, axis=1)[:, :k]             # the best k by the screening estimate ...
    fin_screen = np.take_along_axis(screen, order, axis=1)
    chosen = fin_screen > (base.s1 / base.count)[:, None]   # ... that beat the baseline's
    chosen &= ~np.take_along_axis(stopped, order, axis=1)
    n_fin = chosen.sum(axis=1)
    kk = order.shape[1]
    fin_effect = effects[order]
    # Per finalist slot: sum, sum of squares and count of its boot means (screening boot included).
    s1, s2, cnt = fin_screen.copy(), fin_screen**2, np.ones((n, kk))
    for _ in range(fresh):
        x = fin_effect + boot_sd * rng.standard_normal((n, kk))
        s1 += np.where(chosen, x, 0.0)
        s2 += np.where(chosen, x**2, 0.0)
        cnt += chosen
        for j in range(kk):        # a baseline boot paired with each finalist's fresh boot
            base.add(boot_sd * rng.standard_normal(n), chosen[:, j])
    # Replicate noise: its pooled sum of squares over every boot, grown with each look's two boots.
    rep_df = (m + b0 + fresh * n_fin) * (reps - 1) - reps_lost
    if screen_ratio == sd_ratio and race is None:
        rep_ss = sd_ratio**2 * rng.chisquare(np.maximum(rep_df, 1)) if reps > 1 else np.zeros(n)
    elif reps > 1:   # screening boots' within-boot noise and the full boots', pooled as the analysis pools them
        screen_df = (m + b0) * (reps - 1) - reps_lost
        rep_ss = (screen_ratio**2 * rng.chisquare(np.maximum(screen_df, 1))
                  + sd_ratio**2 * rng.chisquare(np.maximum(fresh * n_fin * (reps - 1), 1)))
    else:
        rep_ss = np.zeros(n)
    best, who = np.ones(n), np.full(n, -1)
    active = n_fin > 0
    t = np.full((n, kk), -np.inf)
    cap = 1 + fresh + extra
    for look in range(extra + 1):
        if look:
            leader = np.argmax(t, axis=1)
            x = fin_effect[rows, leader] + boot_sd * rng.standard_normal(n)
            s1[rows, leader] += np.where(active, x, 0.0)
            s2[rows, leader] += np.where(active, x**2, 0.0)
            cnt[rows, leader] += active
            base.add(boot_sd * rng.standard_normal(n), active)
            if reps > 1:
                rep_ss = rep_ss + np.where(active, sd_ratio**2 * rng.chisquare(2 * (reps - 1), n), 0.0)
                rep_df = rep_df + 2 * (reps - 1) * active
        rep_var = rep_ss / np.maximum(rep_df, 1)
        t, se, per_boot, df = _t_of_finalists(base, s1, s2, cnt, chosen, rep_var / reps)
        top = np.argmax(t, axis=1)
        value = t[rows, top]
        nominal = np.where(np.isfinite(value), stdtr(df, -np.where(np.isfinite(value), value, 0.0)), 1.0)
        better = active & (nominal < best)
        best = np.where(better, nominal, best)
        who = np.where(better, order[rows, top], who)
        if critical is not None:
            nb = base.count
            nc = cnt[rows, top]
            more = cap - nc
            se_cap = np.sqrt(per_boot * (1.0 / (nc + more) + 1.0 / (nb + more)))
            with np.errstate(invalid="ignore"):
                power_cap = ndtr(value * se[rows, top] / se_cap - stdtrit(df + 2 * more, 1.0 - critical))
            active &= (best > critical) & (power_cap >= futility_power)
    return Simulated(best, who)


@dataclass(frozen=True)
class Race:
    """Racing as tune/racing.py runs it, in boot-sd units: stop once the candidate's mean so far plus
    ``z`` standard errors (its boot and its replicates so far, the baseline's screening boots) lies
    ``margin`` below the baseline's mean."""

    z: float          # the two-sided interval's normal quantile
    margin: float     # the minimum effect, log scale over the boot sd

    def screen(self, rng: np.random.Generator, effects: NDArray[np.float64], base_mean: NDArray[np.float64],
               b0: int, ratio: float, reps: int, n: int,
               ) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.float64]]:
        """Each candidate's screening value, whether racing stopped it, and per study the replicate
        df the stopped candidates did not measure."""
        m = effects.size
        boot = effects[None, :] + rng.standard_normal((n, m))
        sums = np.cumsum(ratio * rng.standard_normal((n, m, reps)), axis=2)
        value = boot + sums[..., -1] / reps
        used = np.full((n, m), reps)
        stopped = np.zeros((n, m), dtype=bool)
        base_var = (1.0 + ratio**2 / reps) / b0
        for j in range(1, reps):
            partial = boot + sums[..., j - 1] / j
            se = math.sqrt(1.0 + ratio**2 / j + base_var)
            stop = ~stopped & (partial - base_mean[:, None] + self.z * se < -self.margin)
            value = np.where(stop, partial, value)
            used = np.where(stop, j, used)
            stopped |= stop
        return value, stopped, (reps - used).sum(axis=1).astype(float)


@dataclass
class _Sums:
    """Per simulated study: the sum, sum of squares and count of the baseline's boot means."""

    s1: NDArray[np.float64]
    s2: NDArray[np.float64]
    count: NDArray[np.float64]

    def add(self, x: NDArray[np.float64], where: NDArray[np.bool_]) -> None:
        self.s1 += np.where(where, x, 0.0)
        self.s2 += np.where(where, x**2, 0.0)
        self.count += where


def _t_of_finalists(base: _Sums, s1: NDArray[np.float64], s2: NDArray[np.float64],
                    cnt: NDArray[np.float64], chosen: NDArray[np.bool_], rep_noise: NDArray[np.float64],
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """T and se of every finalist slot (T -inf where none), the per-boot variance and the boot df, as
    compare_boots computes them from the pooled variance components:
    var(diff) = max(boot-mean var, rep var / reps) * (1/n_c + 1/n_b)."""
    nb = base.count
    base_mean = base.s1 / nb
    boot_ss = np.maximum(base.s2 - base.s1 * base_mean, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        fin_ss = np.where(chosen, s2 - s1**2 / cnt, 0.0)
        boot_ss = boot_ss + fin_ss.sum(axis=1)
        boot_df = (nb - 1) + np.where(chosen, cnt - 1, 0).sum(axis=1)
        per_boot = np.maximum(boot_ss / boot_df, rep_noise)   # boot_var floored at 0
        se = np.sqrt(per_boot[:, None] * (1.0 / cnt + 1.0 / nb[:, None]))
        t = (s1 / cnt - base_mean[:, None]) / se
    return np.where(chosen & (se > 0), t, -np.inf), se, per_boot, boot_df


def detection_power(effect_log: float, se_now: float, boots_now: tuple[int, int], boots_then: tuple[int, int],
                    df_now: float, level: float) -> float:
    """Chance that a finalist whose true log effect is ``effect_log`` reaches the nominal ``level``
    once it and the baseline have ``boots_then`` (candidate, baseline) boots instead of
    ``boots_now``, the per-boot variance as now (normal approximation at the critical t of the df
    it will have): what the next boot pairs would buy."""
    if not (math.isfinite(effect_log) and math.isfinite(se_now) and se_now > 0 and df_now > 0):
        return math.nan
    (nc, nb), (nc2, nb2) = boots_now, boots_then
    per_boot = se_now**2 / (1.0 / nc + 1.0 / nb)
    se_then = math.sqrt(per_boot * (1.0 / nc2 + 1.0 / nb2))
    df_then = df_now + (nc2 - nc) + (nb2 - nb)
    return float(ndtr(effect_log / se_then - critical_t(level, df_then)))
