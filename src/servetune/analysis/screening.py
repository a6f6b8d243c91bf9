"""Cheap screening, full finalists: the search's boots (candidates, the baseline and its
re-measurements) run each scenario with `screening.num_prompts_fraction` of its prompts and of its
`duration_s`; finalists and their fresh baselines run them in full.

A shorter run can read differently (a larger share of ramp-up and drain), so each length has its
own baseline reference (tune/analysis.py `SlotReferences`): every objective sample is a ratio to
the baseline measured at the same length, and the bias cancels. A short run's noise is larger;
benchmarks/verdict_calibration.py simulates the pipeline with noisier screening boots and shows
the false-winner rate stays within alpha. A `maximize: capacity` study is not shortened (a level
sends `capacity.num_prompts`: the study file says so), nor a trace replayed whole or a prefill sweep.
"""

from __future__ import annotations

import math

from ..load.scenario import Scenario
from ..store import TrialRole
from ..study.objective import Objective
from ..study.spec import StudySpec


def is_short(spec: StudySpec) -> bool:
    """Whether the study's search boots run shorter than its finalists."""
    return spec.screening.num_prompts_fraction < 1.0 and not Objective(spec).is_capacity


def scenarios_for(spec: StudySpec, role: TrialRole) -> list[Scenario]:
    """The scenarios a trial of `role` runs: shortened during the search, whole after it."""
    scenarios = list(spec.scenarios)
    if not is_short(spec) or role.is_validation:
        return scenarios
    return [shortened(s, spec.screening.num_prompts_fraction) for s in scenarios]


def shortened(scenario: Scenario, fraction: float) -> Scenario:
    """`scenario` with `fraction` of its prompts (at least one) and of its duration."""
    update: dict[str, object] = {}
    if scenario.num_prompts is not None and not scenario.sweep_input_lens:
        update["num_prompts"] = max(1, math.ceil(scenario.num_prompts * fraction))
    if scenario.duration_s is not None:
        update["duration_s"] = scenario.duration_s * fraction
    return scenario.model_copy(update=update)
