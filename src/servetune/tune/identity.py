"""A study directory holds one study: resuming it with another study file is refused.

A resumed study may get more budget or other slots, nothing else; a field a newer servetune added
(a stored spec lacks it) takes its default and is not a change.
"""

from __future__ import annotations

from typing import Any

from ..errors import ServetuneError
from ..store import StudyStore
from ..study.spec import StudySpec

SPEC_KEYS_THAT_MAY_CHANGE = ("budget", "parallel", "measure_bandwidth")


def check_same_study(store: StudyStore, spec: StudySpec) -> None:
    """Store `spec` as the study of this directory, or raise if the directory holds another."""
    new = spec.model_dump(mode="json")
    stored = store.spec_doc()
    if stored is None:
        store.set_spec_doc(new)
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
    store.set_spec_doc(new)


def _as_read_today(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as this servetune reads it: a field added since (`objective.per_gpu`) takes
    its default, so it does not look changed; one it cannot read is compared as stored."""
    try:
        return StudySpec.from_store(stored).model_dump(mode="json")
    except (ValueError, ServetuneError):   # pydantic's ValidationError is a ValueError
        return stored
