"""The study store: one SQLite file per study, written atomically per run, read as Trial records."""

from .meta import EtaEntry, PlannedTrial, SearchStop, Verdict
from .model import BASELINE_ROLES, Exclusion, Run, Trial, TrialRole, TrialState
from .sqlite import StudyStore

__all__ = ["BASELINE_ROLES", "EtaEntry", "Exclusion", "PlannedTrial", "Run", "SearchStop", "StudyStore", "Trial",
           "TrialRole", "TrialState", "Verdict"]
