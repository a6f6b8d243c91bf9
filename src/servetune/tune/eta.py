"""Time estimates from what this study has measured so far (boot and run durations)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from ..store import RunRow, TrialRow

# Before anything is measured: a guess only, replaced by measurements after the first boot/run.
DEFAULT_BOOT_S = 90.0
DEFAULT_RUN_S = 30.0


@dataclass(frozen=True)
class Eta:
    boot_s: float           # median measured boot time
    run_s: dict[str, float]  # median measured run time per scenario
    measured: bool          # False while it is still the default guess

    def trial_s(self, scenarios: list[str], replicates: int) -> float:
        return self.boot_s + replicates * sum(self.run_s.get(s, DEFAULT_RUN_S) for s in scenarios)


def estimate(trials: list[TrialRow], runs: list[RunRow]) -> Eta:
    boots = [t.boot_s for t in trials if t.boot_s is not None]
    per_scenario: dict[str, list[float]] = {}
    for run in runs:
        per_scenario.setdefault(run.scenario, []).append(run.wall_s)
    return Eta(
        boot_s=median(boots) if boots else DEFAULT_BOOT_S,
        run_s={s: median(v) for s, v in per_scenario.items()},
        measured=bool(boots) or bool(runs),
    )
