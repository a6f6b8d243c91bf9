"""Racing inside a trial: a screening candidate that is clearly worse than the baseline stops
measuring after the replicate that shows it, instead of running every replicate.

Clearly worse: the upper end of its objective interval against the baseline, at
`racing.confidence` (two-sided), lies below -`min_effect_pct`. The interval is the screening
comparison of the verdict rule (tune/verdict_rule.py, no selection calibration: this is a
one-boot candidate), so it carries the study's boot-to-boot variance once per boot of each side:
one lucky or unlucky boot does not stop a candidate. Until some config has been booted twice that
variance is unknown and nothing is stopped.

A stopped candidate is never a finalist (its trial keeps `stopped_early`, so a resumed study
keeps the stop); its runs count in the report like any other. Stopping can only take candidates
out of the finalist pool: benchmarks/verdict_calibration.py simulates the whole pipeline with
racing and shows the false-winner rate stays within alpha.

Optuna's pruners do not decide this: MedianPruner, SuccessiveHalving and Hyperband rank a trial's
intermediate values against other trials' at the same step, with no baseline, no boot-level
variance and no error control, and would stop a candidate that is merely below the middle of
the field. The decision here is a paired interval against the baseline. Optuna is still told the
outcome in its own terms: a stopped trial enters TPE's history as PRUNED (search/optuna_tpe.py).
"""

from __future__ import annotations

import math

from ..analysis import analysis
from ..analysis.verdict_rule import judge
from ..store import StudyStore, Trial, TrialRole
from ..study.spec import StudySpec

STOPPED_CLEARLY_WORSE = "stopped early: clearly worse"


def clearly_worse(store: StudyStore, spec: StudySpec, trial: Trial) -> str | None:
    """Why `trial` should stop measuring now (its replicates so far show it clearly worse than the
    baseline), or None. Only screening candidates race: the baseline, finalists and a re-boot of an
    excluded boot are measured in full."""
    if not spec.racing.enabled or trial.role is not TrialRole.candidate or trial.replaces is not None:
        return None
    result = analysis.analyze(store, spec)
    baseline = result.baseline
    config = next((c for c in result.configs if trial.id in c.trial_ids), None)
    if baseline is None or config is None or not baseline.objective_boots or not config.objective_boots:
        return None
    components = result.components
    if components is None or not components.known or any(config.objective_censored) or any(baseline.objective_censored):
        return None   # a censored capacity is a bound, not a value to race on
    judged = judge(baseline.objective_boots, config.objective_boots, components, None,
                   higher_is_better=True, alpha=1.0 - spec.racing.confidence)
    high = judged.comparison.ci_high_pct
    if not math.isfinite(high) or high >= -spec.min_effect_pct:
        return None
    cmp = judged.comparison
    return (f"{STOPPED_CLEARLY_WORSE}: objective {cmp.effect_pct:+.1f}% "
            f"[{cmp.ci_low_pct:+.1f}, {high:+.1f}] at {100 * spec.racing.confidence:g} % against the baseline, "
            f"below -{spec.min_effect_pct:g} % after {len(config.objective_samples)} replicate(s)")


def race(store: StudyStore, spec: StudySpec, trial: Trial) -> str | None:
    """After a replicate: why `trial` stops now, recorded in the store first (a resumed study keeps
    the stop), or None."""
    why = clearly_worse(store, spec, store.trial(trial.id))
    if why is not None:
        store.stop_early(trial.id, why)
    return why
