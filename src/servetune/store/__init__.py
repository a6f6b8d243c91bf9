"""The study store: one SQLite file per study, written atomically per run."""

from .sqlite import RunRow, StudyStore, TrialRow

__all__ = ["RunRow", "StudyStore", "TrialRow"]
