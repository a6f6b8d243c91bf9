"""A study directory holds one study: resuming it with another study file is refused once the
study has a trial.

A resumed study may get more budget or other slots, nothing else; a field a newer servetune added
(a stored spec lacks it) takes its default and is not a change.

The spec is stored only once every start check passed (tune/runner.py): the engine command and the
model, then the flags against the engine's defaults. A start refused by one of them leaves no spec,
so the corrected study file starts the same directory. A stored spec without any trial (an older
servetune stored it before a flag check that then failed; a start stopped before its first boot)
has nothing measured to lose: another study file replaces it, and with it everything a start
writes for its spec before its first trial (`START_META`: the engine's defaults, the re-validation
cap, the ETA seed and first ETA), which belongs to the spec it started with. From the first trial
on, the spec is the study's for good.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..analysis import eta, known
from ..errors import ServetuneError
from ..store import StudyStore, meta
from ..study.spec import StudySpec

# Profiles only choose among what was measured: adding one to a finished study re-reports it.
# The stopping rule only decides whether the search boots more: one added to a long study ends
# it where the measurements already say to (tune/phases.py); a stricter one reopens the search.
SPEC_KEYS_THAT_MAY_CHANGE = ("budget", "parallel", "measure_bandwidth", "profiles", "stopping")
# What a start writes for its spec before the first trial, forgotten with a replaced spec (the
# memory bandwidth is the machine's, kept).
START_META = (meta.SPEC, known.DEFAULTS_META, meta.REVALIDATION, eta.SEED_META, eta.FIRST_ETA_META, meta.ETA_LOG)


def check_same_study(store: StudyStore, spec: StudySpec, note: Callable[[str], None]) -> None:
    """Raise if the directory holds another study than `spec` with a trial; another study without
    one is forgotten (`START_META`), and `note` says so in one line. The spec itself is stored once
    the start's checks passed (`store_spec`)."""
    new = spec.model_dump(mode="json")
    stored = store.spec_doc()
    if stored is None:
        return
    old = _as_read_today(stored)
    # A key the stored spec lacks was added by a newer servetune: its default is not a change.
    changed = [k for k in sorted(set(old) | set(new))
               if k not in SPEC_KEYS_THAT_MAY_CHANGE and k in old and old.get(k) != new.get(k)]
    if not changed:
        return
    if store.trials():
        raise ServetuneError(
            f"{store.path}: this directory holds a different study (changed: {', '.join(changed)}); "
            "use another --out directory, or restore the study file it was started with"
        )
    store.delete_meta(*START_META)
    note(f"{store.path}: the stored study spec had no trial; replaced by this study file's "
         f"(changed: {', '.join(changed)})")


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
