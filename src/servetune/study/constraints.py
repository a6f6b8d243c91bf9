"""Constraints between parameters: `operand OP operand`, optionally only `when` other values match.

`max-num-batched-tokens >= max-model-len` with `when: {enable-chunked-prefill: false}`.
Parsed with a regular expression, never evaluated as code. Operands are parameter or engine-arg
names (`env.NAME` for environment variables), numbers or quoted strings (`kv-cache-dtype !=
'fp8_e5m2'`); OP is one of >=, >, <=, <, ==, !=. A bare word that names nothing in the study,
compared with == or != to a name, is read as the string it spells (`kv-cache-dtype != fp8_e5m2`):
the study file quotes it for you (`StudySpec`, `with_literals`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..engine.config import Config
from ._hints import did_you_mean
from .space import Scalar, env_var, json_field, normalize_param_name

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
ORDER_OPS = frozenset({">=", ">", "<=", "<"})
_TOKEN = r"([\w.\-]+|'[^']*'|\"[^\"]*\")"
_EXPR = re.compile(rf"^\s*{_TOKEN}\s*(>=|<=|==|!=|>|<)\s*{_TOKEN}\s*$")
EQUALITY_OPS = frozenset({"==", "!="})
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


class Operand(NamedTuple):
    name: str | None
    number: int | float | None
    text: str | None = None  # a quoted string
    token: str = ""  # as written

    def __str__(self) -> str:
        if self.text is not None:
            return repr(self.text)
        return self.name if self.name is not None else str(self.number)

    def literal(self) -> int | float | str | None:
        return self.text if self.text is not None else self.number


class Parsed(NamedTuple):
    left: Operand
    op: str
    right: Operand


def _operand(token: str) -> Operand:
    if token[:1] in ("'", '"'):
        return Operand(None, None, token[1:-1], token)
    if _NUMBER.match(token):
        try:
            return Operand(None, int(token), token=token)
        except ValueError:
            return Operand(None, float(token), token=token)
    return Operand(normalize_param_name(token), None, token=token)


@lru_cache(maxsize=256)
def parse(expr: str) -> Parsed:
    """ValueError unless `expr` is `operand OP operand` with at least one named operand."""
    m = _EXPR.match(expr)
    if not m:
        raise ValueError(f"cannot parse {expr!r}: expected 'NAME OP NAME', 'NAME OP NUMBER' or "
                         f"\"NAME OP 'STRING'\" with OP one of {' '.join(_OPS)}")
    parsed = Parsed(_operand(m.group(1)), m.group(2), _operand(m.group(3)))
    if parsed.left.name is None and parsed.right.name is None:
        raise ValueError(f"{expr!r} compares two numbers or strings, no parameter")
    if parsed.op in ORDER_OPS and (parsed.left.text is not None or parsed.right.text is not None):
        raise ValueError(f"{expr!r} orders a string; strings take only == and !=")
    return parsed


def config_value(config: Config, name: str) -> Any:
    """The value a Config gives a parameter or engine arg (env values read back as numbers when they are)."""
    var = env_var(name)
    field = json_field(name)
    if field is not None:
        value = config.flags.get(field[0])
        return value.get(field[1]) if isinstance(value, dict) else None
    if var is None:
        return config.flags.get(name)
    raw = config.env.get(var)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


class Constraint(BaseModel):
    """A rule every proposed Config must satisfy; written as a string or `{expr, when}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expr: str
    when: dict[str, Scalar] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"expr": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _check(self) -> Constraint:
        parse(self.expr)
        object.__setattr__(self, "when", {normalize_param_name(k): v for k, v in self.when.items()})
        return self

    @property
    def parsed(self) -> Parsed:
        return parse(self.expr)

    def names(self) -> list[str]:
        """Every parameter or engine-arg name this constraint reads."""
        p = self.parsed
        return [o.name for o in (p.left, p.right) if o.name is not None] + list(self.when)

    def applies(self, config: Config) -> bool:
        """`when` matches the config's explicit values (an unset flag matches only null)."""
        return all(config_value(config, k) == v for k, v in self.when.items())

    def violation(self, config: Config) -> str | None:
        """None when satisfied (or not applicable, or an operand is unset: the engine's default is
        unknown here, and a config the engine rejects becomes an invalid_arg outcome); else why not."""
        if not self.applies(config):
            return None
        p = self.parsed
        left = config_value(config, p.left.name) if p.left.name is not None else p.left.literal()
        right = config_value(config, p.right.name) if p.right.name is not None else p.right.literal()
        if left is None or right is None:
            return None
        try:
            ok = _OPS[p.op](left, right)
        except TypeError:
            ok = False
        return None if ok else f"{self.describe()} ({p.left}={left!r}, {p.right}={right!r})"

    def with_literals(self, known: set[str]) -> Constraint:
        """This constraint with each bare word that names nothing in `known`, compared with == or
        != to a name that does, quoted as the string it spells (`kv-cache-dtype != fp8_e5m2`). A
        word close to a known name stays a name: a typo is reported as one, not compared."""
        p = self.parsed
        if p.op not in EQUALITY_OPS:
            return self
        tokens = []
        for operand, other in ((p.left, p.right), (p.right, p.left)):
            bare = operand.name is not None and operand.name not in known and not did_you_mean(operand.name, known)
            tokens.append(repr(operand.token) if bare and other.name in known else operand.token)
        expr = f"{tokens[0]} {p.op} {tokens[1]}"
        return self if expr == f"{p.left.token} {p.op} {p.right.token}" else Constraint(expr=expr, when=self.when)

    def describe(self) -> str:
        p = self.parsed
        text = f"{p.left} {p.op} {p.right}"
        if self.when:
            text += " when " + ", ".join(f"{k}={v!r}" for k, v in self.when.items())
        return text


def violations(constraints: list[Constraint], config: Config) -> list[str]:
    return [v for c in constraints if (v := c.violation(config)) is not None]
