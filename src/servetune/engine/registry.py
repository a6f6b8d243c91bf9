"""Engine kinds (the study's `engine: {kind: ...}`) -> the class that runs them, as GuideLLM's
backends register: a module defines its engine class and decorates it with `register_engine`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..errors import ServetuneError
from .base import Engine

if TYPE_CHECKING:
    from ..study.spec import EngineSpec


class EngineClass(Protocol):
    """A registered engine class: builds its engine from the study's `engine` section."""

    @classmethod
    def from_spec(cls, spec: EngineSpec) -> Engine: ...


ENGINES: dict[str, Callable[[EngineSpec], Engine]] = {}

_C = TypeVar("_C", bound=EngineClass)


def register_engine(kind: str) -> Callable[[_C], _C]:
    """Class decorator: `kind` in a study's engine section builds this class with `from_spec`."""
    def add(cls: _C) -> _C:
        ENGINES[kind] = cls.from_spec
        return cls
    return add


def engine_kinds() -> list[str]:
    return sorted(ENGINES)


def engine_for(spec: EngineSpec) -> Engine:
    """The engine a study's `engine` section asks for."""
    factory = ENGINES.get(spec.kind)
    if factory is None:
        raise ServetuneError(f"engine.kind: unknown engine {spec.kind!r}; known: {', '.join(engine_kinds())}")
    return factory(spec)
