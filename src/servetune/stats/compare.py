"""Candidate versus baseline: relative effect with a CI and a two-sided p-value."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from servetune.stats._validate import check_confidence, clean, clean_runs
from servetune.stats.intervals import (
    StatFn,
    Statistic,
    hierarchical_bootstrap_distribution,
    percentile_interval,
    small_run_factor,
    statistic_fn,
    widen,
)
from servetune.stats.types import Comparison

MeanTest = Literal["welch", "permutation"]
PercentileTest = Literal["bootstrap", "permutation"]


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    diff: np.ndarray = np.mean(x, axis=axis) - np.mean(y, axis=axis)
    return diff


def fieller_ratio_ci(
    mean_num: float, var_num: float, mean_den: float, var_den: float, t_crit: float
) -> tuple[float, float]:
    """Fieller's interval for ``mean_num / mean_den`` of two independent means.

    ``var_*`` are the variances of the means (s^2 / n). Returns (-inf, inf) when the
    denominator mean is not significantly different from zero (the set is then unbounded).
    """
    a, b = mean_num, mean_den
    denom = b * b - t_crit * t_crit * var_den
    if denom <= 0.0:
        return -math.inf, math.inf
    root = t_crit * math.sqrt(a * a * var_den + b * b * var_num - t_crit * t_crit * var_num * var_den)
    return (a * b - root) / denom, (a * b + root) / denom


def compare(
    baseline: Sequence[float] | ArrayLike,
    candidate: Sequence[float] | ArrayLike,
    *,
    higher_is_better: bool,
    confidence: float = 0.95,
    test: MeanTest = "welch",
    n_resamples: int = 9999,
    seed: int | np.random.Generator | None = 0,
) -> Comparison:
    """Compare replicate means: effect in % of the baseline mean, its CI, and a two-sided p-value.

    CI: Fieller's interval for the ratio of means, with Welch's degrees of freedom. With the 3-5
    replicates of a tuning study a bootstrap interval undercovers and the delta method is forced
    symmetric; Fieller is exact under normality, allows the asymmetry of a ratio, and with Welch's
    df it excludes 0 % exactly when Welch's test rejects at 1 - confidence, so CI and p agree.

    p-value: Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) or an exact/Monte-Carlo
    permutation test of the mean difference (``scipy.stats.permutation_test``; note that with 3 vs 3
    replicates its smallest possible two-sided p is 0.1). Fewer than 2 replicates on a side: p and
    the CI are NaN/unbounded. Zero variance on both sides: p is 1 for equal means, else 0.
    A baseline mean <= 0 leaves the relative effect undefined (NaN).
    """
    confidence = check_confidence(confidence)
    if test not in ("welch", "permutation"):
        raise ValueError(f"unknown test {test!r}: use 'welch' or 'permutation'")
    b = clean(baseline, "baseline")
    c = clean(candidate, "candidate")
    mb, mc = float(b.mean()), float(c.mean())
    nb, nc = b.size, c.size
    vb = float(b.var(ddof=1)) / nb if nb > 1 else math.nan
    vc = float(c.var(ddof=1)) / nc if nc > 1 else math.nan

    p_value, ratio_low, ratio_high = math.nan, -math.inf, math.inf
    if nb > 1 and nc > 1:
        if vb == 0.0 and vc == 0.0:
            p_value = 1.0 if mb == mc else 0.0
            ratio_low = ratio_high = mc / mb if mb > 0 else math.nan
        else:
            with warnings.catch_warnings():
                # raised when one side is constant; Welch's statistic is still well defined then
                warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
                welch = sps.ttest_ind(c, b, equal_var=False)
            t_crit = float(sps.t.ppf(0.5 + confidence / 2.0, welch.df))
            ratio_low, ratio_high = fieller_ratio_ci(mc, vc, mb, vb, t_crit)
            if test == "welch":
                p_value = float(welch.pvalue)
            else:
                res = sps.permutation_test(
                    (c, b), _mean_diff, permutation_type="independent", vectorized=True,
                    n_resamples=n_resamples, alternative="two-sided", rng=np.random.default_rng(seed),
                )
                p_value = float(res.pvalue)

    if mb > 0:
        effect = 100.0 * (mc / mb - 1.0)
        ci_low, ci_high = 100.0 * (ratio_low - 1.0), 100.0 * (ratio_high - 1.0)
    else:
        effect = ci_low = ci_high = math.nan
    return Comparison(
        effect_pct=effect, ci_low_pct=ci_low, ci_high_pct=ci_high, p_value=p_value,
        baseline_mean=mb, candidate_mean=mc, n_baseline=nb, n_candidate=nc, test=test,
        higher_is_better=higher_is_better, confidence=confidence, statistic="mean",
    )


def compare_percentile(
    baseline_runs: Sequence[ArrayLike],
    candidate_runs: Sequence[ArrayLike],
    q: Statistic = "p99",
    *,
    higher_is_better: bool = False,
    confidence: float = 0.95,
    n_boot: int = 2000,
    test: PercentileTest = "bootstrap",
    seed: int | np.random.Generator | None = 0,
) -> Comparison:
    """Compare a per-request statistic (e.g. p99 TTFT) of pooled runs, baseline vs candidate.

    The CI of the % difference is the percentile interval of candidate/baseline over independent
    hierarchical bootstraps (runs, then requests) of each side, widened for few runs as
    ``hierarchical_bootstrap_ci`` is (``small_run_factor``: the bootstrap sees (R - 1) / R of the
    run-to-run variance and uses normal quantiles). Unwidened, 3 vs 3 runs whose levels differ
    (sd 0.15 on the log scale against a request spread of 0.5, p90) covered 0.90 at 95 % and
    flagged 15 % of A/A pairs; widened (x 1.73 for 3 vs 3 at 95 %) they cover >= 0.93
    (tests/unit/test_stats_compare.py). A side of one run measures no run-to-run spread: its run's
    luck is not in the interval. p-value:
    - ``bootstrap``: the widened interval inverted (the smallest 1 - c whose c-interval excludes
      0 %), so that p < 1 - confidence exactly when the CI excludes 0 %; with one run per side, where
      nothing is widened, ``2 * min(P*(ratio <= 1), P*(ratio >= 1))`` with a +1 correction.
    - ``permutation``: run labels permuted between the two sides (runs are the independent units;
      permuting requests would ignore run-to-run variation); with 3 vs 3 runs the smallest p is 0.1.
    """
    confidence = check_confidence(confidence)
    if test not in ("bootstrap", "permutation"):
        raise ValueError(f"unknown test {test!r}: use 'bootstrap' or 'permutation'")
    b_runs = clean_runs(baseline_runs, "baseline_runs")
    c_runs = clean_runs(candidate_runs, "candidate_runs")
    fn, label = statistic_fn(q)
    rng = np.random.default_rng(seed)
    est_b = float(fn(np.concatenate(b_runs)[None, :])[0])
    est_c = float(fn(np.concatenate(c_runs)[None, :])[0])

    boot_b = hierarchical_bootstrap_distribution(b_runs, fn, n_boot, rng)
    boot_c = hierarchical_bootstrap_distribution(c_runs, fn, n_boot, rng)
    runs = (len(b_runs), len(c_runs))
    factor = small_run_factor(runs, confidence)
    ratio = boot_c / boot_b if est_b > 0 and np.all(boot_b > 0) else None
    if ratio is not None:
        est_ratio = est_c / est_b
        effect = 100.0 * (est_ratio - 1.0)
        r_low, r_high = widen(est_ratio, *percentile_interval(ratio, confidence), factor)
        ci_low, ci_high = 100.0 * (r_low - 1.0), 100.0 * (r_high - 1.0)
    else:  # a zero baseline percentile leaves the relative effect undefined
        effect = ci_low = ci_high = math.nan

    if test == "permutation":
        p_value = _run_permutation_p(b_runs, c_runs, fn)
    elif ratio is not None and factor != 1.0:
        p_value = _widened_interval_p(ratio, est_ratio, runs)
    else:
        diff = boot_c - boot_b
        tail = min(np.count_nonzero(diff <= 0), np.count_nonzero(diff >= 0))
        p_value = min(1.0, 2.0 * (tail + 1) / (n_boot + 1))
    return Comparison(
        effect_pct=effect, ci_low_pct=ci_low, ci_high_pct=ci_high, p_value=p_value,
        baseline_mean=est_b, candidate_mean=est_c, n_baseline=len(b_runs), n_candidate=len(c_runs),
        test=test, higher_is_better=higher_is_better, confidence=confidence, statistic=label,
    )


def _widened_interval_p(ratio: np.ndarray, estimate: float, runs: tuple[int, int]) -> float:
    """The widened bootstrap interval inverted: the smallest 1 - c at which the widened c-interval of
    the ratio excludes 1, so that p < 1 - c exactly when that interval excludes 0 %. The interval
    shrinks as c falls (its quantiles and its widening both), so bisection finds the level; the floor
    2 / (n + 1) keeps p from claiming more than n bootstrap samples resolve."""
    def excludes_one(confidence: float) -> bool:
        low, high = widen(estimate, *percentile_interval(ratio, confidence), small_run_factor(runs, confidence))
        return not low <= 1.0 <= high

    floor = 2.0 / (ratio.size + 1)
    lo, hi = 1e-6, 1.0 - floor   # confidence levels: nearly a point, and the widest the samples resolve
    if not excludes_one(lo):
        return 1.0
    if excludes_one(hi):
        return floor
    for _ in range(30):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if excludes_one(mid) else (lo, mid)
    return 1.0 - hi


def _run_permutation_p(b_runs: list[np.ndarray], c_runs: list[np.ndarray], fn: StatFn) -> float:
    """Two-sided permutation p-value of ``stat(pooled candidate runs) - stat(pooled baseline runs)``,
    with whole runs as the permuted units (exact for the few runs of a study)."""
    runs = b_runs + c_runs

    def stat(idx_c: np.ndarray, idx_b: np.ndarray, axis: int = -1) -> float:
        pooled_c = np.concatenate([runs[int(i)] for i in idx_c])
        pooled_b = np.concatenate([runs[int(i)] for i in idx_b])
        return float(fn(pooled_c[None, :])[0] - fn(pooled_b[None, :])[0])

    res = sps.permutation_test(
        (np.arange(len(b_runs), len(runs)), np.arange(len(b_runs))), stat,
        permutation_type="independent", vectorized=False, n_resamples=9999,
        alternative="two-sided", rng=np.random.default_rng(0),
    )
    return float(res.pvalue)
