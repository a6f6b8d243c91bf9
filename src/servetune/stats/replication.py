"""Adaptive replication: when to stop adding replicates to a config."""

from __future__ import annotations

import math
from collections.abc import Sequence

from servetune.stats._validate import clean
from servetune.stats.intervals import mean_ci
from servetune.stats.types import Decision


def replication_decision(
    candidate_values: Sequence[float],
    baseline_values: Sequence[float] = (),
    *,
    min_reps: int,
    max_reps: int,
    target_rel_half_width: float = 0.02,
    higher_is_better: bool,
    confidence: float = 0.95,
) -> Decision:
    """Stop or continue replicating a config, checked in this order:

    1. fewer than ``min_reps`` values: continue (never stop earlier);
    2. ``max_reps`` reached: stop;
    3. clearly worse: the candidate's whole CI lies on the wrong side of the baseline *mean*
       (upper bound below it when higher is better, lower bound above it otherwise). More
       replicates would only sharpen a loss; stopping here never creates a false "better" claim,
       it only risks abandoning a config whose true effect is no better than the baseline anyway
       (chance <= (1 - confidence)/2 per look when the candidate truly equals the baseline);
    4. precise: the CI half width relative to the mean is at most ``target_rel_half_width``;
    5. otherwise continue.
    """
    if not 1 <= min_reps <= max_reps:
        raise ValueError(f"need 1 <= min_reps <= max_reps, got min_reps={min_reps}, max_reps={max_reps}")
    values = clean(candidate_values, "candidate_values", min_n=0)
    n = values.size
    if n < min_reps:
        return Decision(stop=False, reason=f"{n} of at least {min_reps} replicates", rule="min_reps",
                        n=n, rel_half_width=math.inf)
    ci = mean_ci(values, confidence)
    rel = ci.rel_half_width
    if n >= max_reps:
        return Decision(stop=True, reason=f"reached max_reps={max_reps} (±{rel:.1%})", rule="max_reps",
                        n=n, rel_half_width=rel)
    base = clean(baseline_values, "baseline_values", min_n=0)
    if base.size:
        bmean = float(base.mean())
        worse = ci.high < bmean if higher_is_better else ci.low > bmean
        if worse:
            bound = ci.high if higher_is_better else ci.low
            return Decision(stop=True, rule="worse", n=n, rel_half_width=rel,
                            reason=f"clearly worse: CI bound {bound:.4g} beyond baseline mean {bmean:.4g}")
    if rel <= target_rel_half_width:
        return Decision(stop=True, reason=f"precise: ±{rel:.1%} <= ±{target_rel_half_width:.1%}", rule="precise",
                        n=n, rel_half_width=rel)
    return Decision(stop=False, reason=f"±{rel:.1%} > ±{target_rel_half_width:.1%}", rule="continue",
                    n=n, rel_half_width=rel)
