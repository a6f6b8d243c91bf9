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
    statistic_fn,
)
from servetune.stats.types import Comparison

MeanTest = Literal["welch", "permutation"]
PercentileTest = Literal["bootstrap", "permutation"]


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


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
    hierarchical bootstraps (runs, then requests) of each side. p-value:
    - ``bootstrap``: the inverted percentile interval, ``2 * min(P*(ratio <= 1), P*(ratio >= 1))``
      with a +1 correction, so that p < 1 - confidence exactly when the CI excludes 0 %.
    - ``permutation``: run labels permuted between the two sides (runs are the independent units;
      permuting requests would ignore run-to-run variation); with 3 vs 3 runs the smallest p is 0.1.

    Like ``hierarchical_bootstrap_ci`` this is conservative when runs do not differ in level
    (simulated, 3 vs 3 runs of 200 requests, p90: CI coverage 1.00, A/A rate of p < 0.05: 0.007)
    and optimistic with few runs that do.
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
    if est_b > 0 and np.all(boot_b > 0):
        ratio = boot_c / boot_b
        effect = 100.0 * (est_c / est_b - 1.0)
        r_low, r_high = percentile_interval(ratio, confidence)
        ci_low, ci_high = 100.0 * (r_low - 1.0), 100.0 * (r_high - 1.0)
    else:  # a zero baseline percentile leaves the relative effect undefined
        effect = ci_low = ci_high = math.nan

    if test == "bootstrap":
        diff = boot_c - boot_b
        tail = min(np.count_nonzero(diff <= 0), np.count_nonzero(diff >= 0))
        p_value = min(1.0, 2.0 * (tail + 1) / (n_boot + 1))
    else:
        p_value = _run_permutation_p(b_runs, c_runs, fn)
    return Comparison(
        effect_pct=effect, ci_low_pct=ci_low, ci_high_pct=ci_high, p_value=p_value,
        baseline_mean=est_b, candidate_mean=est_c, n_baseline=len(b_runs), n_candidate=len(c_runs),
        test=test, higher_is_better=higher_is_better, confidence=confidence, statistic=label,
    )


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
