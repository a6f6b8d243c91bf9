"""A study directory holds one study: resuming it with another study file is refused.

A resumed study may get more budget or other slots, nothing else; a field a newer servetune added
(a stored spec lacks it) takes its default and is not a change.

The spec is stored only once every start check passed (tune/runner.py): the engine command and the
model, then the flags against the engine's defaults. A start refused by one of them leaves no spec,
so the corrected study file starts the same directory; a stored spec is the study's for good. (Not
"a changed spec is accepted while no trial is recorded": what a start writes before its first trial,
the engine's defaults, the re-validation cap, the first ETA, belongs to the spec it started with.)
"""

from __future__ import annotations

from typing import Any

from ..errors import ServetuneError
from ..store import StudyStore
from ..study.spec import StudySpec

SPEC_KEYS_THAT_MAY_CHANGE = ("budget", "parallel", "measure_bandwidth")


def check_same_study(store: StudyStore, spec: StudySpec) -> None:
    """Raise if the directory holds another study than `spec`; writes nothing (see `store_spec`)."""
    new = spec.model_dump(mode="json")
    stored = store.spec_doc()
    if stored is None:
        return
    old = _as_read_today(stored)
    # A key the stored spec lacks was added by a newer servetune: its default is not a change.
    changed = [k for k in sorted(set(old) | set(new))
               if k not in SPEC_KEYS_THAT_MAY_CHANGE and k in old and old.get(k) != new.get(k)]
    if changed:
        raise ServetuneError(
            f"{store.path}: this directory holds a different study (changed: {', '.join(changed)}); "
            "use another --out directory, or restore the study file it was started with"
        )


def store_spec(store: StudyStore, spec: StudySpec) -> None:
    """Once the start's checks passed: `spec` is this directory's study (its budget and slots as
    this start has them)."""
    store.set_spec_doc(spec.model_dump(mode="json"))


def _as_read_today(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as this servetune reads it: a field added since (`objective.per_gpu`) takes
    its default, so it does not look changed; one it cannot read is compared as stored."""
    try:
        return StudySpec.from_store(stored).model_dump(mode="json")
    except (ValueError, ServetuneError):   # pydantic's ValidationError is a ValueError
        return stored
