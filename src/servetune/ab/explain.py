"""`servetune ab --explain OUT.yaml`: a study that boots the new version with each setting that
changed set back to the old side's value, one factor at a time.

The field report's fix for an upgrade that regressed was to read both boot logs, list the new
defaults and turn them off one by one (async scheduling off recovered most of it). This writes
that study: the new side's engine as its baseline, and a `space` of one value per changed
setting, the old side's, in the order the A/B report lists them (resolved values from the boot
log first, then the engine config line, then the parsers' defaults). `ofat` boots each toggle
against the baseline and keeps one only if it wins significantly. The text is parsed back with
the study loader before it is written, so the file always loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from ..engine.registry import profile_for
from ..study.draft import flow
from ..study.loader import parse_study
from ..study.space import json_field
from ..study.spec import StudySpec
from .config_diff import ConfigDiff, Difference
from .spec import SIDES, AbSpec

_COMMENT_COLUMN = 44
# Parameters a study may toggle even where the new side's parser was not read: the resolved
# values the boot log shows, whose flags every vLLM with the value has.
_LOGGED_FLAGS = {"async-scheduling", "max-num-batched-tokens", "max-model-len", "attention-backend",
                 "mamba-cache-mode", "compilation-config"}
# Study keys the explain study takes from the A/B's file as they are (the workload and its rules).
_KEPT_KEYS = ("scenarios", "objective", "replicates", "alpha", "min_effect_pct", "budget", "seed")


@dataclass(frozen=True)
class Toggle:
    param: str  # `async-scheduling`, `compilation-config.cudagraph_mode`
    value: Any  # the old side's, as the flag takes it
    difference: Difference


def sides_by_age(versions: dict[str, list[str]]) -> tuple[str, str]:
    """(new, old): the side whose boots logged the higher engine version; B (the upgrade, by the
    A/B's convention) when either is unknown or they are equal."""
    try:
        a, b = (Version(versions[s][-1]) for s in SIDES)
    except (KeyError, IndexError, InvalidVersion):
        return "B", "A"
    return ("A", "B") if a > b else ("B", "A")


def toggles(diff: ConfigDiff, new_spec: StudySpec, new: str, old: str) -> list[Toggle]:
    """Each difference a flag of the new side's engine sets, and that the new side's config does
    not set itself (there nothing default changed), as the old side's value; one per parameter."""
    parser = set(diff.flags.get(new, []))
    requested = set(new_spec.engine.args)
    out: dict[str, Toggle] = {}
    for d in diff.differences:
        if d.flag is None or old not in d.settings or d.flag in out:
            continue
        base = d.flag.partition(".")[0]
        value = d.settings[old]
        if base in requested or not (base in parser if parser else base in _LOGGED_FLAGS):
            continue
        if json_field(d.flag) is not None and isinstance(value, dict):
            continue  # a field of a JSON flag takes a scalar
        if new in d.settings and d.settings[new] == value:
            continue
        out[d.flag] = Toggle(d.flag, value, d)
    return list(out.values())


def explain_study(spec: AbSpec, diff: ConfigDiff, versions: dict[str, list[str]], ab_dir: str,
                  out_name: str) -> tuple[str | None, list[Toggle]]:
    """The study file's text and its toggles; no text when there is nothing to toggle."""
    new, old = sides_by_age(versions)
    new_spec = spec.side(new)
    found = toggles(diff, new_spec, new, old)
    if not found:
        return None, []
    label = {s: f"side {s} ({profile_for(spec.side(s).engine.kind).label} "
                f"{', '.join(versions.get(s, [])) or 'version unknown'})" for s in SIDES}
    lines = [f"# Written by `servetune ab --explain` from the A/B in {ab_dir}.",
             f"# What it answers: which of the {len(found)} setting(s) that differ between {label[old]} and",
             f"#   {label[new]}, the newer, move the newer one's speed.",
             f"# Baseline: {label[new]}'s engine as the A/B ran it; each `space` entry sets one setting back",
             f"#   to {label[old]}'s value, one at a time (ofat: a toggle that wins significantly is kept,",
             "#   the next is tried from there). Each comment says where the difference was seen.",
             f"# Check first: servetune plan {out_name}",
             f"# Run:         servetune tune {out_name} --out runs/{_name(new_spec)}",
             f"name: {flow(_name(new_spec))}", "engine:"]
    engine = new_spec.engine.model_dump(mode="json", exclude_defaults=True)
    engine = {"command": new_spec.engine.command, "model": new_spec.engine.model, **engine}  # always said
    lines += [f"  {key}: {flow(value)}" for key, value in engine.items()]
    lines.append("space:")
    for t in found:
        d = t.difference
        why = f"{d.source}: {d.what}: {old} {d.value(old)}, {new} {d.value(new)}"
        lines.append(f"{f'  {t.param}: {flow([t.value])}'.ljust(_COMMENT_COLUMN - 2)}  # {why}")
    dump = new_spec.model_dump(mode="json", exclude_defaults=True)
    for key in _KEPT_KEYS:
        if key == "scenarios":
            lines.append("scenarios:")
            lines += [f"  - {flow(s.model_dump(mode='json', exclude_defaults=True))}" for s in new_spec.scenarios]
        elif key in dump:
            lines.append(f"{key}: {flow(dump[key])}")
    lines.append("strategy: ofat")
    lines.append(f"{'finalists: 1'.ljust(_COMMENT_COLUMN - 2)}  # the best toggle is booted again beside a fresh "
                 "baseline: a winner needs two boots a side")
    text = "\n".join(lines) + "\n"
    parse_study(text, out_name)  # what is written loads: checked before writing
    return text, found


def _name(new_spec: StudySpec) -> str:
    return f"{new_spec.name}-explain"
