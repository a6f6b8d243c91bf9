"""Latency SLOs (`ttft:p99=1000`) and their judgement with the statistic's own uncertainty.

A percentile's interval is the order-statistic (binomial) one: for n iid values the q-quantile
lies between the l-th and u-th smallest with probability >= 1 - alpha, l and u from Binomial(n, q).
With too few values u exceeds n and the upper bound is infinite: 40 requests cannot show that a
p99 is under anything. Latencies of one run are not independent, though: near capacity the slow
requests come together, in the same queue excursion. So the values are taken in the order they
were sent, cut into consecutive batches, and the variance of the count above the estimate
across batches, over its binomial variance, shrinks n to an effective size (never grows it)
before the ranks are taken (quantile_ci; where that size is too small for a rank, the side is
stretched from the iid bound instead of left infinite). ITL has many gaps per request,
correlated within one, so its interval is a bootstrap over requests instead. A mean gets a
t-interval.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats

from ..errors import ServetuneError
from ..stats.intervals import clustered_effective_size

METRICS = ("ttft", "tpot", "itl", "e2el")
_STAT = re.compile(r"^(mean|p\d+(?:\.\d+)?)$")
_BOOTSTRAP_RESAMPLES = 400
_STRETCH_POWER = 1.5      # a rank-less side's stretch: (n / effective size) to this power
_COMMON_FACTOR = 10       # clustering is also measured at 1 - 10 (1 - q): p90 for a p99
_STOP_INFLATION = 10.0    # assumed variance inflation of a run's count over a limit (early stop)
# A failed request is an infinite value (capacity.http.request_values): for an SLO it is over
# the limit, counted as this multiple of it, a finite value so interpolated percentiles and
# means stay numbers.
OVER_LIMIT_FACTOR = 2.0


class Verdict(StrEnum):
    meets = "meets"            # the statistic's upper bound is at or under the limit
    violates = "violates"      # its lower bound is above the limit
    undecided = "undecided"    # the interval straddles the limit: measure more


@dataclass(frozen=True)
class Slo:
    metric: str        # ttft | tpot | itl | e2el
    stat: str          # mean | p50 | p90 | p95 | p99 | p99.9 ...
    limit_ms: float

    @property
    def quantile(self) -> float | None:
        """0.99 for p99; None for the mean."""
        return None if self.stat == "mean" else float(self.stat[1:]) / 100.0

    @property
    def key(self) -> str:
        """The `vllm bench serve` summary field, e.g. p99_ttft_ms."""
        return f"{self.stat}_{self.metric}_ms"

    def __str__(self) -> str:
        return f"{self.metric}:{self.stat}<={self.limit_ms:g}ms"


def parse_slo(text: str) -> Slo:
    """'ttft:p99=1000' (milliseconds) -> Slo; a ServetuneError naming the text otherwise."""
    head, eq, value = text.partition("=")
    metric, colon, stat = head.strip().lower().partition(":")
    if not eq or not colon or metric not in METRICS or not _STAT.match(stat):
        raise ServetuneError(f"--slo {text!r}: expected METRIC:STAT=MS, METRIC one of {', '.join(METRICS)}, "
                             f"STAT mean or pNN (e.g. ttft:p99=1000)")
    if stat != "mean" and not 0 < float(stat[1:]) < 100:
        raise ServetuneError(f"--slo {text!r}: the percentile must be between 0 and 100")
    try:
        limit = float(value)
    except ValueError:
        raise ServetuneError(f"--slo {text!r}: {value.strip()!r} is not a number of milliseconds") from None
    if not math.isfinite(limit) or limit <= 0:
        raise ServetuneError(f"--slo {text!r}: the limit must be a positive number of milliseconds")
    return Slo(metric, stat, limit)


_STORED = re.compile(r"^(ttft|tpot|itl|e2el):(mean|p\d+(?:\.\d+)?)<=([0-9.eE+-]+)ms$")


def parse_stored(text: str) -> Slo:
    """An SLO as `str(Slo)` writes it (`ttft:p99<=1000ms`, a capacity result's `slos`) back as an
    Slo; a ServetuneError naming the text otherwise."""
    m = _STORED.match(text.strip())
    if m is None:
        raise ServetuneError(f"SLO {text!r}: expected METRIC:STAT<=MSms, as a capacity result writes it")
    return parse_slo(f"{m.group(1)}:{m.group(2)}={m.group(3)}")


_KEY = re.compile(r"^(mean|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


def slo_from_key(key: str, limit_ms: float) -> Slo | None:
    """A study's SLO entry (`p99_ttft_ms: 1000`, the `vllm bench serve` field) as an Slo; None for a
    key a capacity search cannot judge per request (a throughput, a median, a standard deviation)."""
    m = _KEY.match(key)
    if m is None or (m.group(1) != "mean" and not 0 < float(m.group(1)[1:]) < 100):
        return None
    return Slo(m.group(2), m.group(1), float(limit_ms))


def class_slo(key: str, limit_ms: float) -> Slo | None:
    """A traffic class's SLO entry (a mean, median or percentile latency, judged on the class's own
    requests: load/classes.py) as an Slo; None for anything else (a throughput, a standard deviation)."""
    return slo_from_key(key.replace("median_", "p50_", 1), limit_ms)


def slos_from_limits(limits: Mapping[str, float]) -> list[Slo]:
    """The entries of a scenario's limits a capacity search judges per request, in their order."""
    return [slo for k, v in limits.items() if (slo := slo_from_key(k, v)) is not None]


# The latencies a single request has one value of (ITL is many gaps a request): goodput's limits.
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def per_request_limits(slos: Iterable[Slo]) -> dict[str, float]:
    """Goodput's limits: each request's own TTFT, TPOT and E2EL held to the limit of the SLOs on
    that metric (the tightest where several bound it: p99 <= 1000 and mean <= 400 give 400), by
    the names `load.metrics` counts goodput under."""
    limits: dict[str, float] = {}
    for slo in slos:
        if slo.metric in GOODPUT_METRICS:
            limits[slo.metric] = min(slo.limit_ms, limits.get(slo.metric, math.inf))
    return limits


def parse_slos(items: list[str]) -> list[Slo]:
    if not items:
        raise ServetuneError("--slo: give at least one, e.g. --slo ttft:p99=1000")
    slos = [parse_slo(x) for x in items]
    keys = [s.key for s in slos]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ServetuneError(f"--slo: {', '.join(dup)} given more than once")
    return slos


@dataclass(frozen=True)
class Judgement:
    slo: Slo
    n: int              # values the statistic was computed from (requests; gaps for ITL)
    estimate: float     # ms
    low: float          # ms, confidence interval of the statistic
    high: float         # ms (inf: too few values to bound it)
    verdict: Verdict


def quantile_ci(values: np.ndarray, q: float, alpha: float, n_eff: float | None = None) -> tuple[float, float]:
    """Distribution-free (1 - alpha) interval of the q-quantile; -inf / inf where the sample is
    too small to bound that side. `n_eff` (default: all values, i.e. iid): the effective sample
    size; the ranks are taken at that size and mapped to the same fractions of the sample. Where
    that size is too small for a rank but the sample is not, the side is the iid bound's distance
    from the estimate stretched by (n / n_eff) ** _STRETCH_POWER: values far under a limit then
    stay far under it instead of leaving the bound infinite (TPOT of 10 ms in bursts against 50).
    The variance's design effect alone would stretch by the square root; near capacity, where a
    tail is heavier than the sample shows, that covered the queue simulation's capacity in 86 %
    of searches (power 1: 92 %, but 85 % of bursty p95 searches; 1.5: 90 % and 89 %, as with no
    stretch; benchmarks/capacity_search.py --bursty)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        return -math.inf, math.inf
    m = n if n_eff is None else min(max(int(n_eff), 1), n)
    low, high = _rank_bounds(x, q, alpha, m)
    if m < n and not (math.isfinite(low) and math.isfinite(high)):
        iid_low, iid_high = _rank_bounds(x, q, alpha, n)
        estimate, stretch = float(np.percentile(x, 100 * q)), (n / m) ** _STRETCH_POWER
        if not math.isfinite(low) and math.isfinite(iid_low):
            low = _stretched_down(estimate, iid_low, stretch)
        if not math.isfinite(high) and math.isfinite(iid_high):
            high = estimate + (iid_high - estimate) * stretch
    return low, high


def _stretched_down(estimate: float, bound: float, stretch: float) -> float:
    """The lower bound moved `stretch` times as far under the estimate on the log scale, so a
    latency's bound stays positive (additively, p95 TTFT 1268 ms got -143,893). The upper side
    keeps the additive stretch its coverage was measured with (benchmarks/capacity_search.py)."""
    if estimate > 0 and bound > 0:
        scale: float = (bound / estimate) ** stretch  # a positive base: a float, never complex
        return estimate * scale
    return max(estimate + (bound - estimate) * stretch, 0.0)


def _rank_bounds(x: np.ndarray, q: float, alpha: float, m: int) -> tuple[float, float]:
    """The order-statistic bounds of the q-quantile of the sorted `x` at sample size m."""
    n = len(x)
    lo_rank = int(stats.binom.ppf(alpha / 2, m, q))          # P(#below <= lo_rank-1) <= alpha/2
    hi_rank = int(stats.binom.ppf(1 - alpha / 2, m, q)) + 1  # 1-based rank of the upper bound
    low = x[max(math.floor(lo_rank * n / m), 1) - 1] if lo_rank >= 1 else -math.inf
    high = x[min(math.ceil(hi_rank * n / m), n) - 1] if hi_rank <= m else math.inf
    return float(low), float(high)


def effective_size(ordered: np.ndarray, threshold: float) -> float:
    """n shrunk by how much more the count of values over `threshold` varies across consecutive
    batches than it would for independent values (at least 1: never grows n)."""
    return clustered_effective_size(np.asarray(ordered, dtype=np.float64) > threshold)


def tail_effective_size(ordered: np.ndarray, q: float, threshold: float) -> float:
    """The effective size of the indicator "over `threshold`" (a q-quantile's tail) in values
    taken in the order sent. Clustering measured at the threshold alone sees nothing in a run
    that had no slow spell; at a commoner quantile (p90 for a p99) it is seen in every run, and
    extremes cluster at least as much: the smaller effective size of the two."""
    common = float(np.percentile(ordered, 100 * max(1 - _COMMON_FACTOR * (1 - q), 0.5)))
    return min(effective_size(ordered, threshold), effective_size(ordered, common))


def _mean_ci(values: np.ndarray, alpha: float) -> tuple[float, float]:
    n = len(values)
    if n < 2:
        return -math.inf, math.inf
    half = stats.t.ppf(1 - alpha / 2, n - 1) * np.std(values, ddof=1) / math.sqrt(n)
    # A latency's mean is positive: the bound at 0 where the t-interval reaches under it.
    return max(float(np.mean(values) - half), 0.0), float(np.mean(values) + half)


def _clustered_ci(groups: list[np.ndarray], q: float | None, alpha: float, seed: int) -> tuple[float, float]:
    """Bootstrap over requests (clusters of ITL gaps): the statistic of the pooled gaps of
    resampled requests; percentile interval."""
    groups = [g for g in groups if len(g)]
    if len(groups) < 2:
        return -math.inf, math.inf
    rng = np.random.default_rng(seed)
    stat: Callable[[np.ndarray], float] = \
        (lambda a: float(np.mean(a))) if q is None else (lambda a: float(np.percentile(a, 100 * q)))
    draws = [stat(np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))]))
             for _ in range(_BOOTSTRAP_RESAMPLES)]
    return float(np.quantile(draws, alpha / 2)), float(np.quantile(draws, 1 - alpha / 2))


def verdict_of(low: float, high: float, limit: float) -> Verdict:
    if high <= limit:
        return Verdict.meets
    if low > limit:
        return Verdict.violates
    return Verdict.undecided


def counted_over(values: np.ndarray, limit_ms: float) -> np.ndarray:
    """`values` (ms) with the infinite ones (failed requests) as a finite value over `limit_ms`."""
    if np.all(np.isfinite(values)):
        return values
    return np.where(np.isfinite(values), values, limit_ms * OVER_LIMIT_FACTOR)


def judge(slo: Slo, per_request: list[np.ndarray], alpha: float, seed: int = 0) -> Judgement:
    """Judge `slo` on per-request values in ms, in the order the requests were sent (one value
    per request for TTFT, TPOT and E2EL; each request's gaps for ITL; a failed request's value
    is infinite: over the limit)."""
    per_request = [counted_over(v, slo.limit_ms) for v in per_request]
    flat = np.concatenate(per_request) if per_request else np.zeros(0)
    n = len(flat)
    if n == 0:
        return Judgement(slo, 0, math.nan, -math.inf, math.inf, Verdict.undecided)
    q = slo.quantile
    estimate = statistic(slo, flat)
    if slo.metric == "itl":
        low, high = _clustered_ci(per_request, q, alpha, seed)
    elif q is None:
        low, high = _mean_ci(flat, alpha)
    else:
        low, high = quantile_ci(flat, q, alpha, tail_effective_size(flat, q, estimate))
    return Judgement(slo, n, estimate, low, high, verdict_of(low, high, slo.limit_ms))


def statistic(slo: Slo, values: np.ndarray) -> float:
    """The SLO's statistic of these values (ms): their mean or its percentile; NaN for none."""
    if not len(values):
        return math.nan
    return float(np.mean(values)) if slo.quantile is None else float(np.percentile(values, 100 * slo.quantile))


def requests_to_meet(slo: Slo, alpha: float) -> int | None:
    """The fewest requests whose values can show `slo`'s percentile under its limit at all (the
    interval's upper rank within the sample, even if every value were independent); None for a
    mean or ITL (many gaps per request), which a handful of requests can bound. A level of fewer
    requests can only be undecided or violating, so its search never finds a level it can call met."""
    q = slo.quantile
    if q is None or slo.metric == "itl":
        return None
    m = 1
    while int(stats.binom.ppf(1 - alpha / 2, m, q)) + 1 > m:
        m = m * 2
    lo, hi = m // 2, m   # the condition fails at lo (or lo is 0) and holds at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int(stats.binom.ppf(1 - alpha / 2, mid, q)) + 1 <= mid:
            hi = mid
        else:
            lo = mid
    return hi


def lost_after(slo: Slo, planned: int, alpha: float) -> int | None:
    """How many of `planned` values over the limit make the finished level's lower bound exceed
    the limit whatever the rest turn out to be (the level violates; measuring on is wasted);
    None where no count does (a mean, ITL, or too few values). The dependence of the run's
    values is not known yet when this is decided, so the effective size is taken as
    planned / _STOP_INFLATION, a clustering the tests' queue near capacity reaches."""
    q = slo.quantile
    if q is None or slo.metric == "itl" or planned <= 0:
        return None
    m = planned / _STOP_INFLATION
    lo_rank = int(stats.binom.ppf(alpha / 2, int(m), q))
    if lo_rank < 1:
        return None
    # the lower bound is the lo_rank-th smallest (of m): over the limit once m - lo_rank + 1 values are
    return math.ceil((int(m) - lo_rank + 1) * planned / int(m))
