"""What a study keeps in its store's meta table, one JSON value a key, and the types the store's
getters hand out for them (`StudyStore.spec_doc`, `final_plan`, `eta_log`, `verdict`,
`revalidation_cap`): the keys
and their JSON shapes are read and written here alone, so stores of older and newer versions
read the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..engine.provenance import ImageRef
from .model import TrialRole

SPEC = "spec"              # the study spec as dumped (StudySpec.from_store reads it)
FINAL_PLAN = "final_plan"  # [[role, config key], ...]: the validation boots, planned once when the search ends
ETA_LOG = "eta_log"        # [{"trial_seq", "at", "predicted_end"}, ...]: the ETA shown before each boot (unix times)
VERDICT = "verdict"        # {"winner": config key or null, "reason"}: the last finished run's verdict
REVALIDATION = "revalidation"  # {"max_boots": N}: the re-validation cap, fixed when the study starts
BANDWIDTH = "bandwidth"   # {"read_gbps", "device"} or {"unavailable": why}: measured at the start (tune/bandwidth.py)
ENGINE_IMAGES = "engine_images"  # [ImageRef as JSON, ...] in the order first seen (tune/provenance.py)
SEARCH_STOP = "search_stop"  # {"reason", "chance", "threshold", "after_trials"}: why its stopping rule ended the search


class PlannedTrial(NamedTuple):
    """A validation boot of the final plan (stored as a [role, config key] pair)."""

    role: TrialRole
    config_key: str


@dataclass(frozen=True)
class EtaEntry:
    """The study's predicted end when trial `trial_seq` was about to boot, at `at` (unix times)."""

    trial_seq: int
    at: float
    predicted_end: float

    def to_json(self) -> dict[str, Any]:
        return {"trial_seq": self.trial_seq, "at": self.at, "predicted_end": self.predicted_end}

    @classmethod
    def from_json(cls, raw: Any) -> EtaEntry:
        """ValueError when `raw` is not an entry as the runner writes them."""
        try:
            return cls(int(raw["trial_seq"]), float(raw["at"]), float(raw["predicted_end"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"meta '{ETA_LOG}': unreadable entry {raw!r}") from exc


@dataclass(frozen=True)
class Verdict:
    winner: str | None  # the winning config's key; None: nothing beat the baseline
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"winner": self.winner, "reason": self.reason}


@dataclass(frozen=True)
class SearchStop:
    """Why the search ended by its stopping rule (search/stopping.py), once the study's trials
    numbered `after_trials`."""

    reason: str
    chance: float | None
    threshold: float
    after_trials: int

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "chance": self.chance, "threshold": self.threshold,
                "after_trials": self.after_trials}


def search_stop_from_json(raw: Any) -> SearchStop | None:
    if not isinstance(raw, dict):
        return None
    chance = raw.get("chance")
    return SearchStop(str(raw.get("reason", "")), None if chance is None else float(chance),
                      float(raw.get("threshold", 0.0)), int(raw.get("after_trials", 0)))


def final_plan_from_json(raw: Any) -> list[PlannedTrial] | None:
    return None if raw is None else [PlannedTrial(TrialRole(role), str(key)) for role, key in raw]


def verdict_from_json(raw: Any) -> Verdict | None:
    return None if not raw else Verdict(raw.get("winner"), str(raw.get("reason")))


def images_from_json(raw: Any) -> list[ImageRef]:
    """Every image the study's starts found, oldest first (an unreadable entry is left out)."""
    out = []
    for item in raw if isinstance(raw, list) else []:
        try:
            out.append(ImageRef.model_validate(item))
        except ValueError:
            continue
    return out
