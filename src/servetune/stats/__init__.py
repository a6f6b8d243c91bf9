"""Statistics you can trust: pure functions on numpy arrays (no other servetune imports).

Means over replicates get t-intervals; per-request percentiles get a hierarchical bootstrap
(runs, then requests within runs). Candidates are compared with the baseline in % with a CI and a
two-sided p-value, Holm-corrected across candidates, and turned into Verdicts.
"""

from servetune.stats.calibration import (
    aa_false_positive_rate,
    empirical_sampler,
    normal_sampler,
    rate_interval,
    simulate_false_positive_rate,
)
from servetune.stats.compare import compare, compare_percentile, fieller_ratio_ci
from servetune.stats.intervals import hierarchical_bootstrap_ci, mean_ci
from servetune.stats.multiple import holm
from servetune.stats.replication import replication_decision
from servetune.stats.types import Assessment, Comparison, Decision, Interval, Verdict
from servetune.stats.verdict import assess, compare_many, verdict, winners

__all__ = [
    "Assessment", "Comparison", "Decision", "Interval", "Verdict",
    "aa_false_positive_rate", "assess", "compare", "compare_many", "compare_percentile",
    "empirical_sampler", "fieller_ratio_ci", "hierarchical_bootstrap_ci", "holm", "mean_ci",
    "normal_sampler", "rate_interval", "replication_decision", "simulate_false_positive_rate",
    "verdict", "winners",
]
