"""The image a docker-run study measured, recorded at every start of the study (a resume too).

`docker run` with a tag runs whatever image the tag names on that day: inspecting it at each start
keeps every image the study's boots ran in (by id, with its registry digests), so the report can
name it and the emitted deployment can pin it (report/emit.py), and a tag that moved between two
sessions shows as two images.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine.provenance import ImageRef, inspect_image
from ..store import StudyStore, meta


def record_image(store: StudyStore, command: list[str], note: Callable[[str], None],
                 inspect: Callable[[list[str]], ImageRef | None] = inspect_image) -> ImageRef | None:
    """Inspect the engine command's image (None: no docker command) and keep it when it is new."""
    image = inspect(command)
    if image is None:
        return None
    seen = store.engine_images()
    if image.error is not None:
        note(f"the engine's image {image.reference} is not known to docker here: {image.error}")
    if all(s.id != image.id or s.reference != image.reference for s in seen):
        if seen and image.id is not None:
            note(f"the engine's image changed since the study's last start: {image.reference} is now {image.id}")
        store.set_meta_json(meta.ENGINE_IMAGES,
                            [*(s.model_dump(mode="json") for s in seen), image.model_dump(mode="json")])
    return image

