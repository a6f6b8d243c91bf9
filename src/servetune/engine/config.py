"""A Config: the engine flags and environment variables of one candidate server."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

FlagValue = bool | int | float | str | list[Any] | dict[str, Any] | None
# A POSIX shell variable name: anything else cannot be exported, and written into an emitted
# `serve.sh` it would be shell code.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(name: object) -> bool:
    return isinstance(name, str) and _ENV_NAME.fullmatch(name) is not None


def check_env_name(name: str) -> str:
    if not is_env_name(name):
        raise ValueError(f"{name!r} is not an environment variable name (letters, digits and _, not starting "
                         "with a digit)")
    return name


EnvName = Annotated[str, AfterValidator(check_env_name)]


def normalize_flag_name(name: str) -> str:
    """`--max_num_seqs`, `max_num_seqs` and `max-num-seqs` all name the same flag."""
    return name.lstrip("-").replace("_", "-")


class Config(BaseModel):
    """Engine flags (without leading dashes) and environment variables.

    Booleans render as `--x` / `--no-x`, dicts as JSON, lists as repeated values,
    None omits the flag (use the engine's default).
    """

    model_config = ConfigDict(frozen=True)

    flags: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[EnvName, str] = Field(default_factory=dict)
    # In a study that compares engines (`engine.kind` in its space): the kind of a config that runs
    # on another engine section than the study's `engine`; None: the study's engine.
    engine: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No `engine` key for the study's own engine: a stored config reads as it always did."""
        out: dict[str, Any] = handler(self)
        if self.engine is None:
            out.pop("engine", None)
        return out

    @classmethod
    def of(cls, flags: Mapping[str, FlagValue] | None = None, env: Mapping[str, str] | None = None) -> Config:
        return cls(
            flags={normalize_flag_name(k): v for k, v in (flags or {}).items()},
            env={k: str(v) for k, v in (env or {}).items()},
        )

    def merged(self, other: Config) -> Config:
        """This config with `other`'s flags and env laid over it."""
        return Config(flags={**self.flags, **other.flags}, env={**self.env, **other.env},
                      engine=other.engine or self.engine)

    def canonical_json(self) -> str:
        # The engine only where it is another's: the keys of every stored config stay what they were.
        engine = {"engine": self.engine} if self.engine is not None else {}
        return json.dumps({"flags": self.flags, "env": self.env, **engine}, sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """Stable identity of a config: equal flags and env give the same key."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def diff(self, base: Config) -> dict[str, tuple[Any, Any]]:
        """{name: (base value, this value)} for every flag (`--name`) or env (`env.NAME`) that differs."""
        out: dict[str, tuple[Any, Any]] = {}
        if self.engine != base.engine:
            out["engine.kind"] = (base.engine, self.engine)
        for name in sorted(set(self.flags) | set(base.flags)):
            if self.flags.get(name) != base.flags.get(name):
                out[name] = (base.flags.get(name), self.flags.get(name))
        for name in sorted(set(self.env) | set(base.env)):
            if self.env.get(name) != base.env.get(name):
                out[f"env.{name}"] = (base.env.get(name), self.env.get(name))
        return out

    def label(self, base: Config | None = None) -> str:
        """Short human label: the diff from `base`, or all flags."""
        items = self.diff(base) if base is not None else {k: (None, v) for k, v in self.flags.items()}
        if not items:
            return "baseline" if base is not None else "(defaults)"
        return " ".join(f"{k}={_short(v[1])}" for k, v in items.items())


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


_IEC_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|TiB)\s*$")
_IEC_FACTOR = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def render_value(value: int | float | str) -> str:
    """One scalar flag value as argv text. IEC sizes ("2GiB") become bytes: vLLM's
    parser reads "2G" but rejects "2GiB", and study files read better with the unit."""
    if isinstance(value, str):
        match = _IEC_SIZE.match(value)
        if match:
            return str(int(float(match.group(1)) * _IEC_FACTOR[match.group(2)]))
    return str(value)


def render_flags(flags: dict[str, FlagValue]) -> list[str]:
    """Flags as argv items, in a stable order. No shell is involved anywhere."""
    argv: list[str] = []
    for name in flags:
        value = flags[name]
        flag = "--" + normalize_flag_name(name)
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + normalize_flag_name(name))
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, list):
            argv += [flag, *(render_value(v) for v in value)]
        else:
            argv += [flag, render_value(value)]
    return argv
