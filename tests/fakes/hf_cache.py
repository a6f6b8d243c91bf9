"""A Hugging Face cache holding a model's config.json only, as `huggingface_hub` lays it out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def cache_config(monkeypatch: pytest.MonkeyPatch, cache: Path, model_id: str, config: dict[str, Any]) -> Path:
    """`model_id`'s snapshot under `cache` (set as HF_HUB_CACHE, offline), with `config` as its config.json."""
    repo = cache / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "0"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot
