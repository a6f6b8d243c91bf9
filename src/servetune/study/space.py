"""The search Space: one Parameter per engine flag (`max-num-seqs`), environment variable
(`env.NAME`) or field of a JSON flag (`speculative-config.num_speculative_tokens`).

A Parameter is either categorical (a list of values; booleans as `[true, false]`; a JSON flag's
values as mappings) or a numeric range `{low, high, step?, log?, type?}`.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Literal, cast

from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import BaseModel, ConfigDict, model_validator

from ..engine.config import normalize_flag_name
from ..errors import ServetuneError

Scalar = bool | int | float | str | None
# A value of a JSON flag (`speculative-config: {method: ngram, num_speculative_tokens: 3}`).
Value = Scalar | dict[str, Any]
ENV_PREFIX = "env."
FIELD_SEP = "."
# Enumerating more values than this for ofat/grid is a mistake in the study, not a plan.
MAX_ENUMERATED = 10_000


def normalize_param_name(name: str) -> str:
    """`env.NAME` keeps NAME verbatim (environment variables are case-sensitive); flags are
    normalised, a JSON flag's field (`FLAG.field`) keeps the field's spelling (vLLM's JSON keys)."""
    if name.startswith(ENV_PREFIX):
        return name
    flag, sep, field = name.partition(FIELD_SEP)
    return normalize_flag_name(flag) + sep + field


# The space key that makes the engine a dimension (study/spec.py): no flag, no JSON field.
ENGINE_KIND_PARAM = "engine.kind"


def json_field(name: str) -> tuple[str, str] | None:
    """(FLAG, field) for a JSON flag's field `FLAG.field`, else None (a plain flag or `env.NAME`)."""
    if name == ENGINE_KIND_PARAM:
        return None
    if name.startswith(ENV_PREFIX) or FIELD_SEP not in name:
        return None
    flag, _, field = name.partition(FIELD_SEP)
    return flag, field


def value_key(value: Value) -> str:
    """A value's identity for duplicate checks: mappings compare by content, not key order."""
    return json.dumps([type(value).__name__, value], sort_keys=True, default=str)


def env_var(name: str) -> str | None:
    """NAME for `env.NAME`, else None."""
    return name[len(ENV_PREFIX) :] if name.startswith(ENV_PREFIX) else None


def is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Parameter(BaseModel):
    """One dimension of the Space."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    values: tuple[Value, ...] | None = None
    low: int | float | None = None
    high: int | float | None = None
    step: int | float | None = None
    log: bool = False
    type: Literal["int", "float"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, data: Any) -> Any:
        if isinstance(data, (list, tuple)):
            return {"values": list(data)}
        if not isinstance(data, dict):
            raise ValueError("expected a list of values or a range {low, high, step?, log?, type?}")
        return data

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        if self.values is not None:
            if any(x is not None for x in (self.low, self.high, self.step, self.type)) or self.log:
                raise ValueError("give either a list of values or a range {low, high}, not both")
            if not self.values:
                raise ValueError("the list of values is empty")
            seen = [value_key(v) for v in self.values]
            if len(set(seen)) != len(seen):
                raise ValueError("the list of values has duplicates")
            return self
        if self.low is None or self.high is None:
            raise ValueError("a range needs both low and high (or give a list of values)")
        kind = self.type or ("float" if any(isinstance(x, float) for x in (self.low, self.high, self.step)) else "int")
        if kind == "int" and not all(x is None or float(x).is_integer() for x in (self.low, self.high, self.step)):
            raise ValueError("an int range needs whole-number low, high and step")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.step is not None and self.step <= 0:
            raise ValueError("step must be positive")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        if self.log and self.step is not None and not (kind == "int" and self.step == 1):
            raise ValueError("a log range cannot have a step (its values double from low)")
        object.__setattr__(self, "type", kind)
        return self

    @property
    def kind(self) -> Literal["categorical", "int", "float"]:
        return "categorical" if self.values is not None else self.type  # type: ignore[return-value]

    def enumerate(self, name: str) -> tuple[Value, ...]:
        """Every value ofat and grid try: the list; a stepped range low, low+step, ..., high;
        a log range low, 2·low, 4·low, ... (and high). A float range without step cannot be enumerated."""
        if self.values is not None:
            return self.values
        assert self.low is not None and self.high is not None
        cast = int if self.kind == "int" else float
        if self.log:
            out: list[Scalar] = []
            v = float(self.low)
            while v < self.high and len(out) <= MAX_ENUMERATED:
                out.append(cast(v))
                v *= 2
            out.append(cast(self.high))
        elif self.step is not None or self.kind == "int":
            step = self.step if self.step is not None else 1
            n = math.floor((self.high - self.low) / step + 1e-9) + 1
            if n > MAX_ENUMERATED:
                raise ServetuneError(f"space.{name}: {n} values is too many to enumerate; use a larger step or log")
            out = [cast(self.low + i * step) for i in range(n)]
        else:
            raise ServetuneError(f"space.{name}: a float range needs a step (or log: true) to be enumerated")
        return tuple(dict.fromkeys(out))

    def enumerable(self, name: str) -> bool:
        try:
            self.enumerate(name)
        except ServetuneError:
            return False
        return True

    def distribution(self) -> BaseDistribution:
        """The same parameter as an Optuna distribution."""
        if self.values is not None:
            # Optuna keeps a choice by its index; a mapping only draws a warning about storages
            # servetune does not use (the study's own store keeps the params).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Choices for a categorical distribution")
                # Optuna's annotation lists the scalar choice types; a mapping (a JSON flag's value)
                # works as well, with the warning silenced above.
                return CategoricalDistribution(cast("tuple[CategoricalChoiceType, ...]", self.values))
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def contains(self, value: Any) -> bool:
        if self.values is not None:
            return any(type(v) is type(value) and v == value for v in self.values)
        assert self.low is not None and self.high is not None
        if not is_number(value) or not self.low <= value <= self.high:
            return False
        if self.kind == "int":
            return float(value).is_integer() and (self.step is None or (value - self.low) % self.step == 0)
        return True
