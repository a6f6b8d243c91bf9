"""mkdocs hooks (mkdocs.yml `hooks:`): pages generated from the code at build time, so they cannot drift.

`reference/study-file.md` is `servetune.study.reference.study_reference()`: the study file's keys,
types, defaults and meanings, read from the pydantic models that load a study.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
GENERATED = "reference/study-file.md"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))  # this checkout's servetune, not another installed one
    from servetune.study.reference import study_reference

    files.append(File.generated(config, GENERATED, content=study_reference()))
    return files
