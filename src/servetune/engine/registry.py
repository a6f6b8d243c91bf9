"""Engine kinds (the study's `engine: {kind: ...}`) -> the class that runs them, as GuideLLM's
backends register: a module defines its engine class and decorates it with `register_engine`.

Every command builds its engine here (`engine_for` from a study's engine section, `build_engine`
from a command's options), and asks a kind's `EngineProfile` here without building one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..errors import ServetuneError
from .base import Engine
from .bootfacts import BootFacts
from .profile import Capability, EngineProfile

if TYPE_CHECKING:
    from ..study.spec import EngineSpec, StudySpec


class EngineClass(Protocol):
    """A registered engine class: builds its engine from the study's `engine` section."""

    profile: EngineProfile

    @classmethod
    def from_spec(cls, spec: EngineSpec) -> Engine: ...


ENGINES: dict[str, Callable[[EngineSpec], Engine]] = {}
PROFILES: dict[str, EngineProfile] = {}
# A command's engine from its options (command, model, startup timeout, log directory, ...).
BUILDERS: dict[str, Callable[..., Engine]] = {}

_C = TypeVar("_C", bound=EngineClass)


def register_engine(kind: str) -> Callable[[_C], _C]:
    """Class decorator: `kind` in a study's engine section builds this class with `from_spec`."""
    def add(cls: _C) -> _C:
        ENGINES[kind] = cls.from_spec
        PROFILES[kind] = cls.profile
        BUILDERS[kind] = cls  # type: ignore[assignment]  # its constructor takes the command's options
        return cls
    return add


def engine_kinds() -> list[str]:
    return sorted(ENGINES)


def _unknown(kind: str) -> ServetuneError:
    return ServetuneError(f"engine.kind: unknown engine {kind!r}; known: {', '.join(engine_kinds())}")


def engine_for(spec: EngineSpec) -> Engine:
    """The engine a study's `engine` section asks for."""
    factory = ENGINES.get(spec.kind)
    if factory is None:
        raise _unknown(spec.kind)
    return factory(spec)


def engine_for_study(spec: StudySpec) -> Engine:
    """A study's engine: its `engine` section's, or, for a study that compares engines, one over
    all its sections (engine_set.py)."""
    if not spec.engines:
        return engine_for(spec.engine)
    from .engine_set import EngineSet  # the set holds registered engines: built after them
    return EngineSet(engine_for(spec.engine), {k: engine_for(s) for k, s in spec.engines.items()})


def profile_for(kind: str) -> EngineProfile:
    """What engine `kind` is, without building one."""
    profile = PROFILES.get(kind)
    if profile is None:
        raise _unknown(kind)
    return profile


def profiles() -> list[EngineProfile]:
    return [PROFILES[k] for k in engine_kinds()]


def block_pool_tokens(facts: BootFacts) -> int | None:
    """A boot's KV pool in tokens, for a trace's prefix hits replayed on it, where the engine that
    wrote the boot's log replays as vLLM's block pool does (None elsewhere: no replayed rate)."""
    profile = PROFILES.get(facts.engine)
    return facts.kv_cache_tokens if profile is not None and profile.supports(Capability.block_pool_replay) else None


def cpu_bind_variables(kinds: list[str]) -> tuple[str, ...]:
    """The variables through which engines of `kinds` are told a slot's CPUs (engine/placement.py)."""
    return tuple(dict.fromkeys(v for k in kinds if (v := profile_for(k).cpu_bind_env) is not None))


def build_engine(kind: str, command: list[str] | None, model: str, *, startup_timeout_s: float, log_dir: Path,
                 dev_mode: bool = False, pin_engine_core: bool = False,
                 needs: Capability | None = None, where: str = "") -> Engine:
    """A command's engine of `kind` (its default command when `command` is empty); `needs`: a
    feature the command rests on, refused in one line for an engine that lacks it."""
    builder = BUILDERS.get(kind)
    if builder is None:
        raise _unknown(kind)
    if needs is not None:
        profile_for(kind).require(needs, where)
    return builder(command or None, model=model, startup_timeout_s=startup_timeout_s, log_dir=log_dir,
                   dev_mode=dev_mode, pin_engine_core=pin_engine_core)
