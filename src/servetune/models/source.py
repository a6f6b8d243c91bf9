"""Where a study's `engine.model` is and what its config.json says, before any boot.

A model is a local directory or a Hugging Face id. A name of an id's form (`models/tyni`) whose
first part is a directory here is a mistyped local path, not an id. An id is looked up in the
local Hugging Face cache first (where vLLM will read it from), then asked of the Hub: its
config.json, over HTTPS with a short timeout and `HF_TOKEN` when set (gated models). Nothing here
downloads weights.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .architecture import DTYPE_BYTES, active_fraction, language_config, parameter_count

_HUB_TIMEOUT_S = 10.0
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class ModelSource:
    name: str                      # as the study gives it
    reachable: bool
    where: str                     # "local directory", "Hugging Face cache (...)", "Hugging Face Hub", or why not
    directory: Path | None = None  # a local copy, when there is one
    config: dict[str, Any] | None = None
    hub_not_asked: bool = False    # an id found nowhere here, and the Hub not asked (`ask_hub=False`)

    @property
    def weights_gib(self) -> float | None:
        """Weight files' size in a local copy, else the parameter count's bytes."""
        if self.directory is not None:
            return model_gib(self.directory)[0]
        params = parameter_count(self.config) if self.config else None
        if params is None or self.config is None:
            return None
        return params * DTYPE_BYTES.get(str(self.config.get("torch_dtype", "bfloat16")), 2) / 2**30

    @property
    def weights_source(self) -> str:
        """What `weights_gib` rests on."""
        if self.directory is not None:
            return model_gib(self.directory)[1]
        return "config.json from the Hub" if self.config else "nothing read"

    @property
    def has_weights(self) -> bool:
        """A local directory without weight files runs only with `--load-format dummy`."""
        if self.directory is None:
            return True  # a Hub id: vLLM downloads its weights
        return model_gib(self.directory)[1] == "weight files"

    @property
    def is_moe(self) -> bool:
        return self.config is not None and active_fraction(self.config) < 1

    @property
    def max_context(self) -> int | None:
        value = (self.config or {}).get("max_position_embeddings")
        return value if isinstance(value, int) and value > 0 else None


def looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or not _HF_ID.match(model)


def locate(model: str, *, ask_hub: bool = True) -> ModelSource:
    """Where `model` is: a local directory, the Hugging Face cache, or the Hub (`ask_hub`)."""
    path = Path(model).expanduser()
    if path.is_dir():
        config = model_config(path)
        where = "local directory" if config is not None else "local directory without config.json"
        return ModelSource(model, config is not None, where, path, config)
    if looks_like_path(model):
        return ModelSource(model, False, f"no directory {model}")
    if mistyped := _mistyped_local_path(model):
        return ModelSource(model, False, mistyped)
    cached = _cached_snapshot(model)
    if cached is not None:
        return ModelSource(model, True, f"Hugging Face cache ({cached})", cached, model_config(cached))
    if not ask_hub or os.environ.get("HF_HUB_OFFLINE") == "1":
        # HF_HUB_OFFLINE=1: the engine cannot download it either, so the answer is no, not unknown.
        return ModelSource(model, False, "not in the Hugging Face cache, and the Hub is not asked (offline)",
                           hub_not_asked=os.environ.get("HF_HUB_OFFLINE") != "1")
    config, why = _hub_config(model)
    if config is None:
        return ModelSource(model, False, f"not in the Hugging Face cache, and the Hub: {why}")
    return ModelSource(model, True, "Hugging Face Hub (weights downloaded at the first boot)", None, config)


def _mistyped_local_path(model: str) -> str | None:
    """`models/tyni` reads as a Hub id, but where `models/` is a directory here a local path was
    meant (a typo): said so, instead of a start that passes and an engine that asks the Hub."""
    first = model.split("/")[0]
    if Path(first).is_dir():
        return f"no such directory {model} ({first}/ exists here)"
    return None


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def _cached_snapshot(model_id: str) -> Path | None:
    repo = _hub_cache() / ("models--" + model_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text().strip()
        if (snapshot / "config.json").is_file():
            return snapshot
    snapshots = sorted((repo / "snapshots").glob("*/config.json")) if (repo / "snapshots").is_dir() else []
    return snapshots[-1].parent if snapshots else None


def _hub_config(model_id: str) -> tuple[dict[str, Any] | None, str]:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/{model_id}/resolve/main/config.json")
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=_HUB_TIMEOUT_S) as answer:
            config = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        hint = " (a gated model: export HF_TOKEN)" if exc.code in (401, 403) else ""
        return None, f"HTTP {exc.code} for {model_id}'s config.json{hint}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, f"unreachable ({getattr(exc, 'reason', exc)})"
    return (language_config(config), "") if isinstance(config, dict) else (None, "config.json is not a JSON object")


def model_gib(model_dir: Path) -> tuple[float | None, str]:
    """The weights' size in GiB and where it comes from; None when neither files nor config tell."""
    files = [p for p in model_dir.glob("*") if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)]
    if files:
        return sum(p.stat().st_size for p in files) / 2**30, "weight files"
    config = model_config(model_dir)
    if config is None:
        return None, "no weights or config.json"
    params = parameter_count(config)
    if params is None:
        return None, "config.json without sizes"
    return params * DTYPE_BYTES.get(str(config.get("torch_dtype", "bfloat16")), 2) / 2**30, "config.json"


def model_config(model_dir: Path) -> dict[str, Any] | None:
    """The model directory's config.json, flattened (`architecture.language_config`); None when
    it cannot be read."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return language_config(config) if isinstance(config, dict) else None
