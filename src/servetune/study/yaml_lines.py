"""YAML with line numbers: every key path of a document mapped to the line it was written on.

The data are built by PyYAML's SafeLoader (no tags, no code); the marks come from walking the
composed node tree, so an error found later by pydantic can still point at `file:line`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ServetuneError

KeyPath = tuple[Any, ...]
MAX_DEPTH = 64
MAX_ENTRIES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader kept as its own class so nothing registered here leaks into yaml.SafeLoader."""


@dataclass(frozen=True)
class LocatedYaml:
    """A loaded YAML document plus the 1-based line of every key path (`("space", "max-num-seqs")`)."""

    source: str
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def locate(self, loc: Sequence[Any]) -> tuple[int, KeyPath]:
        """Line and the longest prefix of `loc` that exists in the document (the root is line 1)."""
        best: KeyPath = ()
        for i in range(1, len(loc) + 1):
            prefix = tuple(loc[:i])
            if prefix in self.lines:
                best = prefix
        return self.lines.get(best, 1), best

    def where(self, loc: Sequence[Any]) -> str:
        """`file:line` of a key path."""
        line, _ = self.locate(loc)
        return f"{self.source}:{line}"


def load_yaml(path: str | Path) -> LocatedYaml:
    """Load one YAML document; syntax errors and duplicate keys become ServetuneError with a line."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ServetuneError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ServetuneError(f"{source}:{line}: not UTF-8 text "
                             f"(byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    return parse_yaml(text, source)


def parse_yaml(text: str, source: str = "<string>") -> LocatedYaml:
    try:
        loader = _Loader(text)  # checks the characters first: a NUL or other control byte stops here
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1
        raise ServetuneError(f"{source}:{line}: invalid YAML: character #x{exc.character:04x} is not allowed") from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise ServetuneError(f"{source}:1: the file is empty")
        lines: dict[KeyPath, int] = {}
        _walk(loader, node, (), lines, source, [MAX_ENTRIES])
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ServetuneError(f"{source}:{line}: invalid YAML: {exc.problem or exc.context or 'syntax error'}") from exc
    except yaml.YAMLError as exc:
        raise ServetuneError(f"{source}:1: invalid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError:  # PyYAML composes and constructs recursively
        raise ServetuneError(f"{source}:1: invalid YAML: nested too deeply, or an alias that contains itself") from None
    finally:
        loader.dispose()
    return LocatedYaml(source=source, data=data, lines=lines)


def _walk(loader: _Loader, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], source: str,
          budget: list[int]) -> None:
    # Aliases let a few lines stand for exponentially many entries (and one may contain itself):
    # a study is small, so bound the nesting and the entries instead of walking them all.
    budget[0] -= 1
    if budget[0] < 0 or len(path) > MAX_DEPTH:
        line = node.start_mark.line + 1
        raise ServetuneError(f"{source}:{line}: the document nests deeper than {MAX_DEPTH} levels or expands to more "
                             f"than {MAX_ENTRIES} entries (through aliases?); a study file is much smaller")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<:` merge keys the same way construction will
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                hash(key)
            except TypeError:
                raise ServetuneError(f"{source}:{line}: a mapping key must be a plain value") from None
            if key in seen:
                where = ".".join(str(p) for p in (*path, key)).encode("unicode_escape").decode()
                raise ServetuneError(f"{source}:{line}: {where}: duplicate key (first given on line {seen[key]})")
            seen[key] = line
            lines[(*path, key)] = line
            _walk(loader, value_node, (*path, key), lines, source, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(loader, item, (*path, i), lines, source, budget)
