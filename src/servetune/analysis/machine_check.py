"""Which trials ran on a machine unlike their baseline's: another power limit, application clocks,
driver or GPU model than the baseline boot they are divided by (a power cap alone moves short
decode by 20-30 %). Such a trial is kept in the store and shown, but its runs are left out of
every estimate and verdict (analysis.analysis) until its config is measured again on a like machine.

The reference of a trial is the machine of the first measured baseline boot on its slot (the
baseline its objective is a ratio to), else the study's first measured baseline boot. Trials
without a record (a store from before records, a failed boot) are never excluded: unknown is not unlike.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..machine import MachineRecord, differences
from ..store import BASELINE_ROLES, Trial


def _measured_baselines(trials: Sequence[Trial]) -> list[Trial]:
    return [t for t in sorted(trials, key=lambda t: t.seq)
            if t.role in BASELINE_ROLES and t.machine is not None and any(r.ok for r in t.runs)]


def reference_of(trial: Trial, trials: Sequence[Trial]) -> MachineRecord | None:
    baselines = _measured_baselines(trials)
    same_slot = next((t for t in baselines if t.slot == trial.slot), None)
    chosen = same_slot or (baselines[0] if baselines else None)
    return None if chosen is None else chosen.machine


def unlike(trials: Sequence[Trial]) -> dict[int, list[str]]:
    """Trial id -> how its machine differs from its reference (only trials that differ)."""
    out: dict[int, list[str]] = {}
    for trial in trials:
        if trial.machine is None:
            continue
        reference = reference_of(trial, trials)
        found = [] if reference is None else differences(reference, trial.machine)
        if found:
            out[trial.id] = found
    return out
