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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .slo import Slo

LOCAL_FACTOR = 1.3   # the fit keeps the levels within this factor of the crossing it centres on
_PASSES = 2          # centred on the first guess, then on the first fit's own crossing
_ITERATIONS = 50     # Newton steps of one fit, at most (a fit that has not converged is dropped)
_RIDGE = 1e-6        # keeps the Newton system solvable when every share is 0 or 1


@dataclass(frozen=True)
class LevelValues:
    level: float
    values: list[np.ndarray]   # the SLO metric's values of every run at the level (ms)
    unfinished: int = 0        # requests in flight when a run was ended as lost: counted over the limit


@dataclass(frozen=True)
class _Count:
    level: float
    n: int       # values
    over: int    # values over the limit


def crossing(slo: Slo, levels: Sequence[LevelValues], center: float) -> float | None:
    """Where the fitted share of values over `slo`'s limit crosses 1 - its quantile, fitted to
    the levels within LOCAL_FACTOR of `center`; None for a mean, or where those levels do not
    straddle that share or the fit fails."""
    q = slo.quantile
    if q is None:
        return None
    counts = [c for lv in levels if (c := _count(slo, lv)) is not None]
    found: float | None = None
    for _ in range(_PASSES):
        near = [c for c in counts if center / LOCAL_FACTOR <= c.level <= center * LOCAL_FACTOR]
        fitted = _fit(near, 1.0 - q)
        if fitted is None:
            break
        found = center = fitted
    return found


def _count(slo: Slo, lv: LevelValues) -> _Count | None:
    values = np.concatenate(lv.values) if lv.values else np.zeros(0)
    if not len(values):
        return None
    return _Count(lv.level, len(values) + lv.unfinished, int(np.sum(values > slo.limit_ms)) + lv.unfinished)


def _fit(counts: list[_Count], share: float) -> float | None:
    """The level at which a logistic curve in log(level), fitted to `counts`, reaches `share`."""
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
    at = (math.log(share / (1 - share)) - intercept) / slope
    if not x.min() <= at <= x.max():
        return None   # no extrapolation beyond the levels fitted
    return ref * math.exp(at)
