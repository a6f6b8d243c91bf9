"""Strategy names (the study's `strategy:` key) -> strategy classes."""

from __future__ import annotations

from ..study.spec import StudySpec
from .base import SearchBase, Strategy
from .baseline import BaselineOnly
from .grid import Grid
from .ofat import OneFactorAtATime
from .optuna_tpe import OptunaTPE

STRATEGIES: dict[str, type[SearchBase]] = {
    cls.name: cls for cls in (BaselineOnly, OneFactorAtATime, Grid, OptunaTPE)
}


def make_strategy(study: StudySpec) -> Strategy:
    """The study's strategy; fails early (ServetuneError) when ofat or grid meet a space they
    cannot enumerate."""
    strategy = STRATEGIES[study.strategy](study)
    strategy.check()
    return strategy  # type: ignore[return-value]
