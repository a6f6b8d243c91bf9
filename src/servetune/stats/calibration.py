"""A/A calibration: how often the rules call a difference where there is none.

Two kinds: replicate-level (``aa_false_positive_rate``, ``simulate_false_positive_rate``: one boot
per config, as servetune judged before boots were modelled) and boot-level (``aa_boot_calibration``
on real boots of one config, ``simulate_boot_false_positive_rate`` under the two-level model of
``hierarchy.py``): the verdicts a study gives, boot against boot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as sps

from servetune.stats._validate import clean
from servetune.stats.compare import MeanTest, compare
from servetune.stats.hierarchy import Boots, VarianceComponents, compare_boots, variance_components
from servetune.stats.multiple import holm
from servetune.stats.replication import replication_decision
from servetune.stats.types import Comparison, Interval, Verdict
from servetune.stats.verdict import compare_many, label, verdict

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


# --- boots: the two-level model ------------------------------------------------------------


def _study_verdicts(baseline: Boots, candidates: Sequence[Boots], components: VarianceComponents, *,
                    alpha: float, higher_is_better: bool, min_effect_pct: float) -> list[tuple[Comparison, str]]:
    """Every candidate against the baseline as a study judges its objective (analysis/analysis.py):
    compare_boots, Holm across the candidates, verdict, then the label the candidate's boots allow
    (better/worse from two boots on, promising/not_promising from one)."""
    comparisons = [compare_boots(baseline, c, components, higher_is_better=higher_is_better,
                                 confidence=1.0 - alpha) for c in candidates]
    adjusted = holm([c.p_value for c in comparisons])
    return [(cmp, label(verdict(cmp, alpha, float(p), min_effect_pct), min(len(c), len(baseline))))
            for cmp, p, c in zip(comparisons, adjusted, candidates)]


_NO_VERDICT = ("no_difference",)


@dataclass(frozen=True)
class BootCalibration:
    """A/A comparisons formed from boots of one config (see ``aa_boot_calibration``)."""

    components: VarianceComponents                   # from every boot
    single: list[tuple[Comparison, str]]             # one boot against one, with the label
    paired: list[tuple[Comparison, str]]             # two boots against two, with the label
    single_rate: Interval                            # share of single comparisons labelled promising/not_promising
    paired_rate: Interval | None                     # share of paired comparisons labelled better/worse

    @property
    def any_rate(self) -> Interval:
        return _hit_rate(self.single + self.paired, "aa-boots(any)")


def aa_boot_calibration(boots: Sequence[Sequence[float]], *, alpha: float = 0.05, higher_is_better: bool = True,
                        min_effect_pct: float = 0.0) -> BootCalibration:
    """False-verdict rates on real boots of one config, in the order they were booted.

    Disjoint comparisons, so each is an independent A/A experiment on its own boots:
    - single: boots (0, 1), (2, 3), ... one against one, the variance components from all the
      *other* boots (as a study pools them from its configs booted more than once); a hit is
      p < alpha, labelled promising/not_promising: the verdict a one-boot label may not say.
    - paired: boots (0, 2) against (1, 3), (4, 6) against (5, 7), ... as a study of those four
      boots judges a finalist (components from those boots alone, ``_study_verdicts``); a hit is a
      better or worse label.
    Alternating boots keep slow drift (the machine's load over the hour) on both sides alike.
    """
    groups = [list(map(float, b)) for b in boots]
    if len(groups) < 2:
        raise ValueError(f"need at least 2 boots, got {len(groups)}")
    def judged(baseline: Boots, candidate: Boots, components: VarianceComponents) -> list[tuple[Comparison, str]]:
        return _study_verdicts(baseline, [candidate], components, alpha=alpha, higher_is_better=higher_is_better,
                               min_effect_pct=min_effect_pct)

    single = []
    for i in range(0, len(groups) - 1, 2):
        others = groups[:i] + groups[i + 2:]
        components = variance_components([others if len(others) >= 2 else groups])
        single += judged([groups[i]], [groups[i + 1]], components)
    paired = []
    for i in range(0, len(groups) - 3, 4):
        base, cand = [groups[i], groups[i + 2]], [groups[i + 1], groups[i + 3]]
        paired += judged(base, cand, variance_components([base, cand]))
    return BootCalibration(components=variance_components([groups]), single=single, paired=paired,
                           single_rate=_hit_rate(single, "aa-boots(1 vs 1)"),
                           paired_rate=_hit_rate(paired, "aa-boots(2 vs 2)") if paired else None)


def _hit_rate(judged: list[tuple[Comparison, str]], method: str) -> Interval:
    return rate_interval(sum(lab not in _NO_VERDICT for _, lab in judged), len(judged), method)


def simulate_boot_false_positive_rate(
    boot_sd: float,
    rep_sd: float,
    *,
    replicates: int = 3,
    baseline_boots: int = 2,
    candidate_boots: int = 2,
    n_candidates: int = 1,
    alpha: float = 0.05,
    min_effect_pct: float = 0.0,
    model: Literal["boots", "replicates"] = "boots",
    n_experiments: int = 1000,
    seed: int = 0,
) -> Interval:
    """Share of null studies with any verdict (better/worse, or promising/not_promising for one-boot
    candidates) when boots really vary: ``log y = b + e`` with ``b ~ N(0, boot_sd)`` per boot and
    ``e ~ N(0, rep_sd)`` per replicate, every config identical.

    ``model="boots"``: judged as a study judges (``_study_verdicts``, components from every config).
    ``model="replicates"``: every config's replicates pooled and compared with Welch and Holm, as if
    boots did not exist — what servetune did before: the boot's luck, shared by all its replicates,
    then reads as an effect.
    """
    if n_experiments < 1 or n_candidates < 1 or replicates < 1:
        raise ValueError("n_experiments, n_candidates and replicates must be >= 1")
    rng = np.random.default_rng(seed)

    def config(boots: int) -> list[list[float]]:
        levels = rng.normal(0.0, boot_sd, boots)
        return [list(np.exp(level + rng.normal(0.0, rep_sd, replicates))) for level in levels]

    hits = 0
    for _ in range(n_experiments):
        baseline = config(baseline_boots)
        candidates = [config(candidate_boots) for _ in range(n_candidates)]
        if model == "boots":
            components = variance_components([baseline, *candidates])
            labels = [lab for _, lab in _study_verdicts(baseline, candidates, components, alpha=alpha,
                                                     higher_is_better=True, min_effect_pct=min_effect_pct)]
        else:
            pooled = {f"c{i}": np.concatenate(c) for i, c in enumerate(candidates)}
            labels = [str(a.verdict) for a in compare_many(np.concatenate(baseline), pooled, higher_is_better=True,
                                                           alpha=alpha, min_effect_pct=min_effect_pct).values()]
        hits += int(any(lab not in _NO_VERDICT for lab in labels))
    return rate_interval(hits, n_experiments, method=f"simulated-fpr({model},{baseline_boots}v{candidate_boots} boots)")
