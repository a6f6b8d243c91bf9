"""The trial model: one immutable record per server boot, with its runs, as the store hands it out.

In the shape of Optuna's `FrozenTrial` + `TrialState`: the store is the only writer, and every
reader (runner, analysis, strategies' history, report) takes the same record. Role, state and
outcome are `StrEnum`s, so a comparison with the plain string (`trial.role == "candidate"`) still
holds and the store keeps the same text in its columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..engine.applied import AppliedMismatch
from ..engine.bootfacts import BootFacts
from ..engine.cache import CacheRecord
from ..engine.config import Config
from ..engine.knobs import KnobEvidence
from ..engine.placement import Placement
from ..load.records import RunSummary
from ..machine import MachineRecord, RunMachine
from ..vocabulary import Outcome


class TrialRole(StrEnum):
    """Why a trial boots a server."""

    baseline = "baseline"              # the study's reference config, first
    candidate = "candidate"            # proposed by the search strategy
    baseline_check = "baseline_check"  # the baseline again during the search (drift)
    finalist = "finalist"              # a promising candidate re-validated on a fresh boot
    baseline_final = "baseline_final"  # the baseline booted beside the finalists
    ab_a = "ab_a"                      # `servetune ab`: a boot of engine A
    ab_b = "ab_b"                      # `servetune ab`: a boot of engine B

    @property
    def is_baseline(self) -> bool:
        return self in BASELINE_ROLES

    @property
    def is_validation(self) -> bool:
        """Booted after the search, from the stored finalist plan."""
        return self in (TrialRole.finalist, TrialRole.baseline_final)


BASELINE_ROLES = frozenset({TrialRole.baseline, TrialRole.baseline_check, TrialRole.baseline_final})


class TrialState(StrEnum):
    running = "running"  # written before the server starts; a killed tuner leaves it so
    done = "done"        # has an outcome


@dataclass(frozen=True)
class Run:
    """One scenario measured once on one trial's server."""

    id: int
    trial_id: int
    scenario: str
    replicate: int
    attempt: int
    outcome: Outcome
    summary: RunSummary
    server_stats: dict[str, Any]
    client_health: dict[str, Any]
    records_path: str | None
    error: str | None
    started_at: float
    ended_at: float
    machine: RunMachine | None = None  # the machine sampled through the run (None: not sampled, older store)

    @property
    def wall_s(self) -> float:
        return self.ended_at - self.started_at

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.ok


@dataclass(frozen=True)
class Exclusion:
    """Why a boot is kept out of the verdict: its measurement far from its config's other boots
    (analysis/outliers.py). The config is booted once more with a wiped cache in its place."""

    why: str                 # one line for the report
    value: float             # the boot's mean objective (ratio to the baseline)
    median: float            # the median of the config's boots it was judged against
    scale: float             # the robust spread used (log scale)
    k: float                 # how many spreads away counts as far

    def to_json(self) -> dict[str, Any]:
        return {"why": self.why, "value": self.value, "median": self.median, "scale": self.scale, "k": self.k}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Exclusion:
        return cls(str(doc["why"]), float(doc["value"]), float(doc["median"]), float(doc["scale"]), float(doc["k"]))


@dataclass(frozen=True)
class Trial:
    """One server boot: what was asked (role, config, params), what the boot showed, what was measured."""

    id: int
    seq: int
    role: TrialRole
    config: Config
    params: dict[str, Any]
    state: TrialState
    outcome: Outcome | None
    detail: str | None
    log_path: str | None
    log_tail: str | None
    boot_facts: BootFacts | None
    mismatches: list[AppliedMismatch]
    server_pid: int | None
    server_pgid: int | None
    server_create_time: float | None
    started_at: float
    healthy_at: float | None
    ended_at: float | None
    session_id: int | None = None  # the session running it (None: a store from before owners were kept)
    launch_token: str | None = None  # in the server's env; recorded before the spawn
    runs: tuple[Run, ...] = ()       # in the order they were measured
    slot: int = 0                    # the slot that runs it (a store from before slots: 0)
    placement: Placement | None = None  # that slot's GPUs/CPUs (None: a store from before slots)
    earlier_boots: int = 0           # healthy boots before the current one (reopened after a kill)
    earlier_boot_s: float = 0.0      # their launch-to-healthy seconds (a store from before: 0, unknown)
    knobs: tuple[KnobEvidence, ...] = ()  # each env knob of the boot (a store from before: none checked)
    cache: CacheRecord | None = None  # its cache root and state (None: a store from before caches were kept)
    exclusion: Exclusion | None = None  # set when the boot is kept out of the verdict
    stopped_early: str | None = None    # why it stopped measuring early (tune/racing.py); never a finalist

    @property
    def replaces(self) -> int | None:
        """The seq of the excluded boot this trial was booted to replace (with a wiped cache), or None."""
        return self.cache.replaces_trial if self.cache is not None else None
    machine: MachineRecord | None = None  # the slot's GPUs / CPU before the (current) boot; None: unknown

    @property
    def status(self) -> str:
        """The state under its older name (the store's column is still `status`)."""
        return self.state

    @property
    def done(self) -> bool:
        return self.state is TrialState.done

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.ok

    @property
    def boot_s(self) -> float | None:
        """The current boot's launch-to-healthy seconds."""
        return None if self.healthy_at is None else self.healthy_at - self.started_at

    @property
    def boots(self) -> int:
        """Healthy boots of this trial, the current one included."""
        return self.earlier_boots + (self.healthy_at is not None)

    @property
    def total_boot_s(self) -> float:
        """Seconds all its healthy boots took: what booting cost the study for this trial."""
        return self.earlier_boot_s + (self.boot_s or 0.0)

    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

