"""A/A calibration: how often the rules call a difference where there is none."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from servetune.stats._validate import clean
from servetune.stats.compare import MeanTest, compare
from servetune.stats.replication import replication_decision
from servetune.stats.types import Interval, Verdict
from servetune.stats.verdict import compare_many

# sampler(rng, size) -> `size` replicate values of one config's metric.
Sampler = Callable[[np.random.Generator, int], NDArray[np.float64]]


def rate_interval(hits: int, trials: int, method: str, confidence: float = 0.95) -> Interval:
    """A proportion with its exact (Clopper-Pearson) binomial interval."""
    ci = sps.binomtest(hits, trials).proportion_ci(confidence_level=confidence, method="exact")
    return Interval(estimate=hits / trials, low=float(ci.low), high=float(ci.high), n=trials,
                    method=method, confidence=confidence)


def normal_sampler(mean: float, cv: float) -> Sampler:
    """Replicates ~ Normal(mean, (cv * mean)^2)."""
    return lambda rng, size: rng.normal(mean, cv * mean, size)


def empirical_sampler(values: ArrayLike) -> Sampler:
    """Replicates drawn with replacement from measured values (e.g. pooled A/A replicates), so a
    simulation runs on the machine's real noise instead of an assumed distribution."""
    pool = clean(values, "values", min_n=2)
    return lambda rng, size: rng.choice(pool, size=size, replace=True)


def aa_false_positive_rate(
    samples_a: ArrayLike,
    samples_b: ArrayLike,
    *,
    alpha: float = 0.05,
    test: MeanTest = "welch",
    n_splits: int = 2000,
    seed: int = 0,
) -> Interval:
    """False-positive rate of ``compare`` estimated from measured A/A data.

    A and B are replicate values of the *same* config; every split of their pool into groups of
    the original sizes is an A/A experiment on the real noise distribution. All splits are used
    when there are at most ``n_splits`` of them, else ``n_splits`` random ones. The splits share
    values, so the interval reflects only the Monte-Carlo error of this estimate.
    """
    a = clean(samples_a, "samples_a", min_n=2)
    b = clean(samples_b, "samples_b", min_n=2)
    pool = np.concatenate([a, b])
    n, k = pool.size, a.size
    if math.comb(n, k) <= n_splits:
        splits = [np.array(idx) for idx in itertools.combinations(range(n), k)]
    else:
        rng = np.random.default_rng(seed)
        splits = [rng.permutation(n)[:k] for _ in range(n_splits)]
    hits = 0
    for idx in splits:
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        p = compare(pool[mask], pool[~mask], higher_is_better=True, test=test, seed=seed).p_value
        hits += int(p < alpha)
    return rate_interval(hits, len(splits), method=f"aa-resplit({test})")


def _replicate_until_stop(
    sampler: Sampler, rng: np.random.Generator, baseline: NDArray[np.float64], *, min_reps: int,
    max_reps: int, target_rel_half_width: float, higher_is_better: bool,
) -> NDArray[np.float64]:
    values = sampler(rng, min_reps)
    while not replication_decision(values, baseline, min_reps=min_reps, max_reps=max_reps,
                                   target_rel_half_width=target_rel_half_width,
                                   higher_is_better=higher_is_better).stop:
        values = np.append(values, sampler(rng, 1))
    return values


def simulate_false_positive_rate(
    sampler: Sampler,
    *,
    n_candidates: int = 1,
    min_reps: int = 3,
    max_reps: int = 5,
    baseline_reps: int | None = None,
    target_rel_half_width: float = 0.02,
    higher_is_better: bool = True,
    alpha: float = 0.05,
    test: MeanTest = "welch",
    count: Literal["winner", "any"] = "winner",
    n_experiments: int = 1000,
    seed: int = 0,
) -> Interval:
    """False-positive rate of the full decision rule, by simulation under the null.

    Each experiment draws ``baseline_reps`` (default ``max_reps``) baseline replicates and, for each
    of ``n_candidates`` candidates identical to the baseline, replicates until
    ``replication_decision`` stops; then Welch/permutation tests, Holm across candidates, verdicts.
    ``count="winner"`` counts experiments in which some candidate is judged better (a false winner);
    ``"any"`` also counts false "worse" verdicts.
    """
    if n_experiments < 1 or n_candidates < 1:
        raise ValueError("n_experiments and n_candidates must be >= 1")
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_experiments):
        baseline = sampler(rng, baseline_reps or max_reps)
        candidates = {
            f"c{i}": _replicate_until_stop(sampler, rng, baseline, min_reps=min_reps, max_reps=max_reps,
                                           target_rel_half_width=target_rel_half_width,
                                           higher_is_better=higher_is_better)
            for i in range(n_candidates)
        }
        verdicts = [a.verdict for a in compare_many(baseline, candidates, higher_is_better=higher_is_better,
                                                    alpha=alpha, test=test).values()]
        flagged = (Verdict.better in verdicts if count == "winner"
                   else any(v is not Verdict.no_difference for v in verdicts))
        hits += int(flagged)
    return rate_interval(hits, n_experiments, method=f"simulated-fpr({test},{count})")
