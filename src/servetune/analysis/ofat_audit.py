"""Did a study walk one factor at a time? Replays OFAT's incumbent over the stored trials and
names every candidate that does not differ from the incumbent of its time in exactly one parameter
(an end-to-end check of the strategy on a real study's store)."""

from __future__ import annotations

from typing import Any

from ..search.ofat import OneFactorAtATime
from ..store import StudyStore, TrialRole
from ..study.spec import StudySpec
from .analysis import history_of

_UNSET = object()


def off_one_factor(store: StudyStore, spec: StudySpec) -> list[str]:
    """One line per candidate that changed no parameter, or more than one, from the incumbent of
    its time (the walk replayed over the trials before it); empty when the study walked OFAT."""
    strategy = OneFactorAtATime(spec)
    trials = store.trials()
    problems = []
    for i, trial in enumerate(trials):
        if trial.role is not TrialRole.candidate:
            continue
        incumbent = strategy.incumbent(history_of(trials[:i], spec, store.path.parent))
        changed = _changed(incumbent, trial.params)
        if len(changed) != 1:
            problems.append(f"#{trial.seq} {trial.params} changes {sorted(changed) or 'nothing'} "
                            f"from the incumbent {incumbent}")
    return problems


def _changed(incumbent: dict[str, Any], params: dict[str, Any]) -> set[str]:
    return {k for k in incumbent.keys() | params.keys() if incumbent.get(k, _UNSET) != params.get(k, _UNSET)}
