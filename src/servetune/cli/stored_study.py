"""A finished study's store and spec, opened read-only for the commands that only read it
(`report`, `size`): a directory without a study, or a spec that no longer reads, is one line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from ..errors import ServetuneError
from ..store import StudyStore
from ..study.spec import StudySpec
from .boundary import store_errors, validation_text


@contextmanager
def stored_study(study_dir: Path) -> Iterator[tuple[StudyStore, StudySpec]]:
    with store_errors(study_dir / StudyStore.FILENAME):
        store = StudyStore.open_existing(study_dir, read_only=True)
        try:
            raw = store.spec_doc()
            if raw is None:
                raise ServetuneError(f"{study_dir}: the store holds no study spec (meta 'spec')")
            try:
                spec = StudySpec.from_store(raw)
            except ValidationError as exc:
                raise ServetuneError(f"{study_dir}: the stored study spec is unreadable: "
                                     f"{validation_text(exc)}") from None
            yield store, spec
        finally:
            store.close()
