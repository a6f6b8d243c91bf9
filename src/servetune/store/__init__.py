"""The study store: one SQLite file per study, written atomically per run, read as Trial records."""

from .model import BASELINE_ROLES, Run, RunRow, Trial, TrialRole, TrialRow, TrialState
from .sqlite import StudyStore

__all__ = ["BASELINE_ROLES", "Run", "RunRow", "StudyStore", "Trial", "TrialRole", "TrialRow", "TrialState"]
