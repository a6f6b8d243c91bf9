"""`load_study`: YAML file -> StudySpec, or one ServetuneError naming file, line and key path."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..errors import ServetuneError
from ..load.scenario import Scenario
from ._hints import did_you_mean
from .spec import ENGINE_KINDS, STRATEGY_NAMES, Loc, SpecError, StudySpec, dotted
from .yaml_lines import LocatedYaml, load_yaml, parse_yaml

# Keys a model accepts besides its fields (consumed by a before-validator).
_EXTRA_KEYS: dict[type[BaseModel], list[str]] = {Scenario: ["preset"]}
# Custom error types whose problem sits one key below the error's location.
_ERROR_SUBKEY = {"unknown_preset": "preset"}
_MAX_ERRORS = 8
_PLAIN_KEY = re.compile(r"^[\w.\-]+$")


def load_study(path: str | Path) -> StudySpec:
    """A study file; the relative paths it names (a scenario's trace) are from its folder."""
    return _validate(load_yaml(path), Path(path).parent)


def parse_study(text: str, source: str = "<string>") -> StudySpec:
    return _validate(parse_yaml(text, source))


def study_from_document(doc: LocatedYaml, base_dir: Path | None = None) -> StudySpec:
    """A loaded (possibly rewritten) YAML document as a StudySpec, errors located in its file."""
    return _validate(doc, base_dir)


def located_lines(doc: LocatedYaml, problems: list[tuple[Loc, str]]) -> list[str]:
    """One `file:line: key: message` line a problem found once the study loaded (a start's checks)."""
    return [f"{doc.where(loc)}: {dotted(loc)}: {msg}" for loc, msg in problems]


def _validate(doc: LocatedYaml, base_dir: Path | None = None) -> StudySpec:
    if not isinstance(doc.data, dict):
        raise ServetuneError(f"{doc.source}:1: a study is a mapping of keys (name, engine, space, ...)")
    try:
        return StudySpec.model_validate(doc.data, context=_context(base_dir))
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors(include_url=False)]
    except SpecError as exc:
        problems = [(loc, msg, False) for loc, msg in exc.problems]
    raise ServetuneError(_format(doc, problems)) from None


def _context(base_dir: Path | None) -> dict[str, Any]:
    """What validation checks a study file against: the registered engines and strategies, and the
    file's folder (a scenario's relative trace path is from there)."""
    # Imported here: the strategies' modules import the study package, whose __init__ imports this one.
    from ..engine.registry import engine_kinds
    from ..search.registry import strategy_names

    context: dict[str, Any] = {ENGINE_KINDS: engine_kinds(), STRATEGY_NAMES: strategy_names()}
    if base_dir:
        context["base_dir"] = base_dir
    return context


def _describe(err: Any) -> tuple[Loc, str, bool]:
    """(location, message, whether the last loc item is a key absent from the file)."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "extra_forbidden":
        msg = f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], _keys_at(StudySpec, loc[:-1]))}"
    elif kind == "missing":
        msg = "required key is missing"
    if kind in _ERROR_SUBKEY:
        loc = (*loc, _ERROR_SUBKEY[kind])
    return loc, msg, kind == "missing"


def _format(doc: LocatedYaml, problems: list[tuple[Loc, str, bool]]) -> str:
    lines: list[str] = []
    for loc, msg, absent in problems:
        line, found = doc.locate(loc)
        path = (*found, loc[-1]) if absent and loc else found
        text = printable(f"{doc.source}:{line}: {dotted(tuple(map(_key_text, path))) or '(top level)'}: {msg}")
        if text not in lines:
            lines.append(text)
    more = len(lines) - _MAX_ERRORS
    return "\n".join(lines[:_MAX_ERRORS] + ([f"... and {more} more"] if more > 0 else []))


def _key_text(key: Any) -> Any:
    """A key as written in a message: quoted when it is empty or holds spaces or punctuation."""
    return key if not isinstance(key, str) or _PLAIN_KEY.match(key) else repr(key)


def printable(text: str) -> str:
    """Control characters (a key with a newline, a carriage return) escaped: one problem, one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _keys_at(tp: Any, loc: Loc) -> list[str]:
    """The keys a mapping at `loc` (relative to type `tp`) accepts, for did-you-mean."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _keys_at(args[0], loc)
    if origin in (Union, types.UnionType):
        for member in args:
            if keys := _keys_at(member, loc):
                return keys
        return []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        model: type[BaseModel] = tp
        if not loc:
            return [*model.model_fields, *_EXTRA_KEYS.get(model, [])]
        field = model.model_fields.get(str(loc[0]))
        return _keys_at(field.annotation, loc[1:]) if field is not None else []
    if origin in (list, tuple) and loc and args:
        return _keys_at(args[0], loc[1:])
    if origin is dict and loc and args:
        return _keys_at(args[1], loc[1:])
    return []
