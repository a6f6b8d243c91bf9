"""An engine's server on a model directory for the length of one command (`bench`, `capacity` and
`drift` with `--serve`, `--engine` its kind): started, handed to the command, always stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import NoResult, ServetuneError
from ..machine import checked_record
from .base import Engine
from .config import Config
from .registry import block_pool_tokens, build_engine, profile_for


@contextmanager
def served(model_dir: Path, flags: dict[str, Any], log_dir: Path, run_id: str, api_key: str | None,
           allow_busy: bool, note: Callable[[str], None],
           kind: str = "vllm") -> Iterator[tuple[str, str | None, int | None]]:
    """Engine `kind` launched on `model_dir` with `flags` (the command's --serve-arg) for the
    duration: yields its URL, the key to send (`api_key`, else the one the server uses) and its KV
    pool in tokens for a replay of its block pool (the boot log's, None where it did not say or the
    engine's pool does not replay so); always stopped. A busy machine refuses the boot
    (`allow_busy`: --allow-busy-gpu). `note` hears when it starts and when it is up."""
    if not model_dir.is_dir():
        raise ServetuneError(f"--serve {model_dir}: not a directory")
    engine: Engine = build_engine(kind, None, str(model_dir), startup_timeout_s=900, log_dir=log_dir)
    config = Config.of(flags)
    api_key = api_key or engine.client_api_key(config)
    checked_record(None, allow_busy=allow_busy, where="--serve")
    note(f"starting {profile_for(kind).label} on {model_dir} ...")
    t0 = time.monotonic()
    started = engine.start(config, log_dir / f"{run_id}.server.log")
    if not started.ok or started.server is None:
        raise NoResult(f"the server did not start: {started.outcome.value}: {started.detail}")
    note(f"server up at {started.server.url} after {time.monotonic() - t0:.0f} s")
    try:
        yield started.server.url, api_key, block_pool_tokens(started.boot_facts)
    finally:
        engine.stop(started.server)
