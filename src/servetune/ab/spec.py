"""What an A/B compares: two engines on one workload, from two study files or from one study
file with an `ab:` section that overrides parts of `engine` per side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServetuneError
from ..study import StudySpec
from ..study.loader import located_lines, study_from_document
from ..study.spec import Loc
from ..study.yaml_lines import LocatedYaml, load_yaml

SIDES = ("A", "B")
AB_KEY = "ab"
# What both sides must share: an A/B compares engines, so the workload and the rules are one.
SHARED_KEYS = ("scenarios", "replicates", "alpha", "min_effect_pct")


@dataclass(frozen=True)
class AbSpec:
    a: StudySpec
    b: StudySpec
    sources: tuple[str, str]
    docs: tuple[LocatedYaml, LocatedYaml]  # each side's study as written: where its keys are

    def side(self, name: str) -> StudySpec:
        return self.a if name == "A" else self.b

    def located(self, name: str, problems: list[tuple[Loc, str]]) -> list[str]:
        """`file:line: key: message` of a side's problems, at that side's lines (one file: an
        engine key its `ab.SIDE` overrides is at that line)."""
        return located_lines(self.docs[SIDES.index(name)], problems)

    @property
    def workload(self) -> StudySpec:
        """Scenarios, replicates, alpha, min_effect_pct: the same on both sides."""
        return self.a


def load_ab(paths: Sequence[Path]) -> AbSpec:
    """`A.yaml B.yaml`, or one file whose `ab: {A: {...}, B: {...}}` overrides `engine` keys per side."""
    if len(paths) == 1:
        return _from_one_file(paths[0])
    if len(paths) != 2:
        raise ServetuneError(f"ab: expected two study files (A.yaml B.yaml) or one with an '{AB_KEY}:' section, "
                             f"got {len(paths)}")
    docs = (load_yaml(paths[0]), load_yaml(paths[1]))
    a, b = (study_from_document(doc, Path(p).parent) for doc, p in zip(docs, paths, strict=True))
    _check_same_workload(a, b, str(paths[0]), docs[1])
    return AbSpec(a, b, (str(paths[0]), str(paths[1])), docs)


def _from_one_file(path: Path) -> AbSpec:
    doc = load_yaml(path)
    data = doc.data if isinstance(doc.data, dict) else {}
    overrides = data.get(AB_KEY)
    if not isinstance(overrides, dict) or sorted(overrides) != list(SIDES):
        raise ServetuneError(f"{doc.where((AB_KEY,))}: {AB_KEY}: expected {{A: {{engine keys}}, B: {{engine keys}}}} "
                             "(or give two study files)")
    sides, docs = [], []
    for side in SIDES:
        part = overrides[side] or {}
        if not isinstance(part, dict):
            raise ServetuneError(f"{doc.where((AB_KEY, side))}: {AB_KEY}.{side}: expected a mapping of engine keys")
        engine: dict[str, Any] = {**(data.get("engine") or {}), **part}
        rest = {k: v for k, v in data.items() if k != AB_KEY}
        docs.append(LocatedYaml(doc.source, {**rest, "engine": engine}, _engine_lines_from_side(doc, side)))
        sides.append(study_from_document(docs[-1], path.parent))
    return AbSpec(sides[0], sides[1], (f"{path} ({AB_KEY}.A)", f"{path} ({AB_KEY}.B)"), (docs[0], docs[1]))


def _engine_lines_from_side(doc: LocatedYaml, side: str) -> dict[tuple[Any, ...], int]:
    """The document's key lines, with each `engine` key that `ab.SIDE` overrides located at its
    line there: an error in B's command names B's line, not the shared engine's."""
    lines = dict(doc.lines)
    prefix = (AB_KEY, side)
    for path, line in doc.lines.items():
        if path[:2] == prefix and len(path) > 2:
            lines[("engine", *path[2:])] = line
    return lines


def _check_same_workload(a: StudySpec, b: StudySpec, a_source: str, b_doc: LocatedYaml) -> None:
    a_dump, b_dump = a.model_dump(mode="json"), b.model_dump(mode="json")
    for key in SHARED_KEYS:
        if a_dump[key] != b_dump[key]:
            raise ServetuneError(f"{b_doc.where((key,))}: {key}: differs from {a_source}'s; an A/B measures "
                                 "both engines on the same workload")
