"""The study file: Space, constraints, scenarios, objective and SLOs."""

from .constraints import Constraint
from .loader import load_study, parse_study
from .objective import Objective
from .space import Parameter
from .spec import Budget, EngineSpec, ObjectiveSpec, Replicates, SpecError, StudySpec

__all__ = [
    "Budget",
    "Constraint",
    "EngineSpec",
    "Objective",
    "ObjectiveSpec",
    "Parameter",
    "Replicates",
    "SpecError",
    "StudySpec",
    "load_study",
    "parse_study",
]
