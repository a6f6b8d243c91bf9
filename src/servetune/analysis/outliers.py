"""A boot far from its config's other boots is booted once more with a wiped cache, and kept out.

A poisoned compile cache slows a server without an error, and a first boot differs from a warm one
(engine/cache.py): a boot whose objective lies far from its config's other boots (the rule of
stats/outliers.py) is excluded from the verdict, with why, and its config is booted once more on a
wiped cache in its place, with the same role (a baseline boot stays a baseline boot, so the design
the verdict is calibrated for keeps its boot counts). At most one boot per config is excluded: a
second far boot says the config is noisy, not that one cache was bad, and stays in. A boot that
was itself booted on a wiped cache is never excluded. Both phases (tune/phases.py) ask
`next_reboot` before anything else; every answer is a function of the store, so a study killed
between excluding a boot and beginning its re-boot begins it on resume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..stats.outliers import K, far_boots
from ..store import Exclusion, StudyStore, Trial
from ..study.spec import StudySpec
from . import analysis


@dataclass(frozen=True)
class Reboot:
    """Boot `trial`'s config again on a wiped cache; `exclusion` is new (to store) or None (stored)."""

    trial: Trial
    exclusion: Exclusion | None


def next_reboot(store: StudyStore, spec: StudySpec) -> Reboot | None:
    """An excluded boot still without its re-boot (a resumed study), else a newly found far boot."""
    trials = store.trials()
    replaced = {t.replaces for t in trials if t.replaces is not None}
    pending = next((t for t in trials if t.exclusion is not None and t.seq not in replaced), None)
    if pending is not None:
        return Reboot(pending, None)
    excluded_configs = {t.config.key() for t in trials if t.exclusion is not None}
    for key, boots in analysis.boot_objectives(trials, spec).items():
        if key in excluded_configs:
            continue
        for far in far_boots([value for _, value in boots]):
            trial = boots[far.index][0]
            if trial.replaces is not None:
                continue
            pct = 100.0 * (far.value / far.median - 1.0)
            why = (f"its objective is {pct:+.0f} % from the median of the config's {len(boots)} boots, "
                   f"{far.deviations:.1f} spreads of {100 * math.expm1(far.scale):.1f} % (far: more than {K:g})")
            return Reboot(trial, Exclusion(why, far.value, far.median, far.scale, K))
    return None


def describe(trial: Trial, exclusion: Exclusion) -> str:
    """One line for the display and the report."""
    return f"boot #{trial.seq} ({trial.role}) excluded: {exclusion.why}; booted again on a wiped cache"
