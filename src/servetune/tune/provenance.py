"""The image a docker-run study measured, recorded at every start of the study (a resume too).

`docker run` with a tag runs whatever image the tag names on that day: inspecting it at each start
keeps every image the study's boots ran in (by id, with its registry digests), so the report can
name it and the emitted deployment can pin it (report/emit.py), and a tag that moved between two
sessions shows as two images.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine.provenance import ImageRef, inspect_image
from ..store import StudyStore

META_KEY = "engine_images"   # [ImageRef as JSON, ...] in the order first seen


def record_image(store: StudyStore, command: list[str], note: Callable[[str], None],
                 inspect: Callable[[list[str]], ImageRef | None] = inspect_image) -> ImageRef | None:
    """Inspect the engine command's image (None: no docker command) and keep it when it is new."""
    image = inspect(command)
    if image is None:
        return None
    seen = stored_images(store)
    if image.error is not None:
        note(f"the engine's image {image.reference} is not known to docker here: {image.error}")
    if all(s.id != image.id or s.reference != image.reference for s in seen):
        if seen and image.id is not None:
            note(f"the engine's image changed since the study's last start: {image.reference} is now {image.id}")
        store.set_meta_json(META_KEY, [*(s.model_dump(mode="json") for s in seen), image.model_dump(mode="json")])
    return image


def stored_images(store: StudyStore) -> list[ImageRef]:
    """Every image the study's starts found, oldest first (an unreadable entry is left out)."""
    raw = store.get_meta_json(META_KEY)
    out = []
    for item in raw if isinstance(raw, list) else []:
        try:
            out.append(ImageRef.model_validate(item))
        except ValueError:
            continue
    return out
