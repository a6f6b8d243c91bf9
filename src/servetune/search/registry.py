"""Strategy names (the study's `strategy:` key) -> strategy classes, registered as engines are
(engine/registry.py): a module defines its strategy class and decorates it with
`register_strategy`, which files it under the class's `name`."""

from __future__ import annotations

from typing import TypeVar

from ..errors import ServetuneError
from ..study.spec import StudySpec
from .base import SearchBase, Strategy

STRATEGIES: dict[str, type[SearchBase]] = {}

_S = TypeVar("_S", bound=type[SearchBase])


def register_strategy(cls: _S) -> _S:
    """Class decorator: `strategy: <cls.name>` in a study builds this class."""
    STRATEGIES[cls.name] = cls
    return cls


def strategy_names() -> list[str]:
    return sorted(STRATEGIES)


def make_strategy(study: StudySpec) -> Strategy:
    """The study's strategy; fails early (ServetuneError) when ofat or grid meet a space they
    cannot enumerate."""
    cls = STRATEGIES.get(study.strategy)
    if cls is None:
        raise ServetuneError(f"strategy: unknown strategy {study.strategy!r}; known: {', '.join(strategy_names())}")
    strategy = cls(study)
    strategy.check()
    return strategy  # type: ignore[return-value]
