"""The capacity's point estimate for a percentile SLO, pooled over the levels near it.

A pXX SLO holds while the share of values over its limit stays at or under 1 - XX/100, and that
share rises with the load. A logistic curve in log(level) is fitted to each level's count of
values over the limit (binomial likelihood, its runs pooled, undecided levels included), and the
capacity is where the curve crosses 1 - XX/100. The fit keeps the levels within LOCAL_FACTOR of a
first guess (the crossing of the two adjacent levels' statistics), then is fitted again around its
own crossing: near the crossing a straight logit is a fair shape, while far under it a server's
share stays at a floor and far over it flattens towards 1.

Why counts and not each level's percentile: a percentile from one short run is biased low against
the long-run one wherever slow requests come in spells (most short runs have none), while counts
summed over runs and levels are not; and two adjacent levels alone give the crossing a slope
made of their noise. A run ended early as lost counts its requests still in flight as over the
limit (they are the slow ones; left out, the share of a lost level would read low).

Only a crossing the levels straddle is returned (some level's share over 1 - XX/100, some at or
under it, the crossing between the levels fitted); otherwise None, and the caller keeps the
interpolation between adjacent levels.

The crossing comes with its (1 - alpha) interval, Fieller's: the levels x at which the fitted
logit's distance from logit(1 - XX/100) is within z of its own standard error; a side is open
(0 or inf) where the slope is not clearly positive (the set is then unbounded). The standard
errors are the fit's with each level's binomial information divided by its design effect (n
over the effective size slo.py finds for values over the limit): slow requests come in spells,
so a level's count over the limit varies several times more than a binomial count of as many
independent values, and the binomial interval would be that much too narrow. The covariance is
then scaled by DISPERSION, measured (below).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.special import expit

from .slo import Slo, counted_over, tail_effective_size

LOCAL_FACTOR = 1.3   # the fit keeps the levels within this factor of the crossing it centres on
_PASSES = 2          # centred on the first guess, then on the first fit's own crossing
_ITERATIONS = 50     # Newton steps of one fit, at most (a fit that has not converged is dropped)
_RIDGE = 1e-6        # keeps the Newton system solvable when every share is 0 or 1
# The crossing's variance over the one the design effects give. A design effect from at most 8
# batches of a level's values is itself noisy and, on average, too small: on the simulated server
# of benchmarks/capacity_search.py the fitted crossing's error over its standard error had a
# spread of 2.1 (200 searches), a variance 4.4 times the nominal one; x3 left the interval
# covering the truth in 88 % of one set of 100 searches.
DISPERSION = 4.0


@dataclass(frozen=True)
class LevelValues:
    level: float
    values: list[np.ndarray]   # the SLO metric's values of every run at the level (ms)
    unfinished: int = 0        # requests in flight when a run was ended as lost: counted over the limit


@dataclass(frozen=True)
class _Count:
    level: float
    n: int           # values
    over: int        # values over the limit
    design: float    # the variance of `over` over a binomial one's (n / effective size, >= 1)


@dataclass(frozen=True)
class Crossing:
    point: float   # where the fitted share crosses 1 - XX/100
    low: float     # its (1 - alpha) interval; 0 where the fit does not bound it from below
    high: float    # inf where the fit does not bound it from above


def crossing(slo: Slo, levels: Sequence[LevelValues], center: float) -> float | None:
    """Where the fitted share of values over `slo`'s limit crosses 1 - its quantile (fitted_crossing)."""
    found = fitted_crossing(slo, levels, center, alpha=0.05)
    return None if found is None else found.point


def fitted_crossing(slo: Slo, levels: Sequence[LevelValues], center: float, alpha: float) -> Crossing | None:
    """Where the fitted share of values over `slo`'s limit crosses 1 - its quantile, with its
    (1 - alpha) interval, fitted to the levels within LOCAL_FACTOR of `center`; None for a mean,
    or where those levels do not straddle that share or the fit fails."""
    q = slo.quantile
    if q is None:
        return None
    counts = [c for lv in levels if (c := _count(slo, q, lv)) is not None]
    found: Crossing | None = None
    for _ in range(_PASSES):
        near = [c for c in counts if center / LOCAL_FACTOR <= c.level <= center * LOCAL_FACTOR]
        fitted = _fit(near, 1.0 - q, alpha)
        if fitted is None:
            break
        found, center = fitted, fitted.point
    return found


def _count(slo: Slo, q: float, lv: LevelValues) -> _Count | None:
    values = counted_over(np.concatenate(lv.values) if lv.values else np.zeros(0), slo.limit_ms)
    if not len(values):
        return None
    design = len(values) / tail_effective_size(values, q, slo.limit_ms)
    return _Count(lv.level, len(values) + lv.unfinished, int(np.sum(values > slo.limit_ms)) + lv.unfinished, design)


def _fit(counts: list[_Count], share: float, alpha: float) -> Crossing | None:
    """The level at which a logistic curve in log(level), fitted to `counts`, reaches `share`,
    with Fieller's interval."""
    if len(counts) < 2 or not min(c.over / c.n for c in counts) <= share < max(c.over / c.n for c in counts):
        return None
    levels = np.array([c.level for c in counts])
    n = np.array([c.n for c in counts], dtype=np.float64)
    over = np.array([c.over for c in counts], dtype=np.float64)
    ref = float(np.exp(np.mean(np.log(levels))))
    x = np.log(levels / ref)
    design = np.column_stack([np.ones_like(x), x])
    pooled = (over.sum() + 0.5) / (n.sum() + 1.0)
    beta = np.array([math.log(pooled / (1 - pooled)), 0.0])
    for _ in range(_ITERATIONS):
        p = expit(design @ beta)
        hessian = design.T @ (design * (n * p * (1 - p))[:, None]) + _RIDGE * np.eye(2)
        step = np.linalg.solve(hessian, design.T @ (over - n * p) - _RIDGE * beta)
        beta = beta + step
        if not np.all(np.isfinite(beta)):
            return None
        if np.max(np.abs(step)) < 1e-8:
            break
    else:
        return None   # not converged: the levels separate perfectly, so any slope fits
    intercept, slope = float(beta[0]), float(beta[1])
    if slope <= 0:
        return None   # the share falls as the load rises: no crossing to trust
    target = math.log(share / (1 - share))
    at = (target - intercept) / slope
    if not x.min() <= at <= x.max():
        return None   # no extrapolation beyond the levels fitted
    p = expit(design @ beta)
    design_effect = np.array([c.design for c in counts])
    weight = n * p * (1 - p) / design_effect
    information = design.T @ (design * weight[:, None]) + _RIDGE * np.eye(2)
    low, high = _fieller(intercept - target, slope, DISPERSION * np.linalg.inv(information), alpha)
    return Crossing(ref * math.exp(at), ref * math.exp(low) if math.isfinite(low) else 0.0,
                    ref * math.exp(high) if math.isfinite(high) else math.inf)


def _fieller(offset: float, slope: float, cov: np.ndarray, alpha: float) -> tuple[float, float]:
    """The x where (offset + slope x)^2 <= z^2 Var(offset + slope x): the (1 - alpha) interval
    of the root of a straight line with estimated coefficients (covariance `cov`); (-inf, inf)
    where the slope is not clearly positive (the set is unbounded then)."""
    z2 = float(stats.norm.ppf(1 - alpha / 2)) ** 2
    a = slope * slope - z2 * float(cov[1, 1])
    if slope <= 0 or a <= 0:
        return -math.inf, math.inf
    b = offset * slope - z2 * float(cov[0, 1])
    c = offset * offset - z2 * float(cov[0, 0])
    root = math.sqrt(max(b * b - a * c, 0.0))
    return (-b - root) / a, (-b + root) / a
