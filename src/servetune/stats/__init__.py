"""Statistics you can trust: pure functions on numpy arrays (no other servetune imports).

Boots are nested in configs (``hierarchy.py``): effects are ratios on the log scale with boot and
replicate variance, labels say whether a candidate was judged boot against boot. Means over
replicates get log-t intervals; per-request percentiles get a hierarchical bootstrap
(runs, then requests within runs). Candidates are compared with the baseline in % with a CI and a
two-sided p-value and turned into Verdicts; a study's finalists are tested at the critical value
of its whole screen -> finalist -> verdict pipeline (``pipeline.py``).
"""

from servetune.stats.calibration import (
    BootCalibration,
    aa_boot_calibration,
    aa_false_positive_rate,
    empirical_sampler,
    normal_sampler,
    rate_interval,
    simulate_boot_false_positive_rate,
    simulate_false_positive_rate,
)
from servetune.stats.compare import compare, compare_percentile, fieller_ratio_ci
from servetune.stats.hierarchy import (
    VarianceComponents,
    compare_boots,
    log_difference,
    log_mean_se,
    variance_components,
)
from servetune.stats.intervals import hierarchical_bootstrap_ci, log_t_ci, mean_ci
from servetune.stats.multiple import holm
from servetune.stats.power import boots_needed, detectable_effect_pct
from servetune.stats.replication import replication_decision
from servetune.stats.types import Assessment, Comparison, Decision, Interval, Verdict
from servetune.stats.verdict import assess, compare_many, label, verdict, winners

__all__ = [
    "Assessment", "BootCalibration", "Comparison", "Decision", "Interval", "VarianceComponents", "Verdict",
    "aa_boot_calibration", "aa_false_positive_rate", "assess", "boots_needed", "compare", "compare_boots",
    "compare_many",
    "compare_percentile", "detectable_effect_pct", "empirical_sampler", "fieller_ratio_ci",
    "hierarchical_bootstrap_ci", "holm", "label", "log_difference", "log_mean_se", "log_t_ci", "mean_ci",
    "normal_sampler",
    "rate_interval", "replication_decision", "simulate_boot_false_positive_rate",
    "simulate_false_positive_rate", "variance_components",
    "verdict", "winners",
]
