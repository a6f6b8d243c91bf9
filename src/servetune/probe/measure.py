"""One boot of a config, each scenario run once on it, the server stopped: the memory probe's
measurement (engine + load wired together, like a trial without a store)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.base import Engine, StartResult
from ..engine.config import Config
from ..load.bench import run_scenario
from ..load.options import RunOptions
from ..load.records import RunResult
from ..load.scenario import Scenario
from ..server_http import ServerAnswerError
from ..tune.trial import served_model_name


@dataclass
class Measured:
    start: StartResult
    runs: list[RunResult] = field(default_factory=list)
    error: str = ""  # why not every scenario was run


def measure(engine: Engine, config: Config, scenarios: list[Scenario], out_dir: Path,
            tokenizer_dir: Path | None, label: str,
            progress: Callable[[str, int, int], None] | None = None) -> Measured:
    """Boot `config`, run every scenario once (the engine's step between runs before each: vLLM empties
    its prefix cache), always stop."""
    started = engine.start(config, out_dir / "logs" / f"{label}.server.log")
    measured = Measured(started)
    if not started.ok or started.server is None:
        measured.error = f"the server did not start: {started.outcome.value}: {started.detail}"
        return measured
    server = started.server
    try:
        api_key = engine.client_api_key(config)
        try:
            model = served_model_name(server.url, api_key)
        except ServerAnswerError as exc:
            measured.error = f"asking the server for its model: {exc}"
            return measured
        for scenario in scenarios:
            engine.before_run(server.url, api_key)
            result = run_scenario(
                server.url, model, scenario, RunOptions(tokenizer_dir=tokenizer_dir, out_dir=out_dir / "runs",
                run_id=f"{label}-{scenario.name}", api_key=api_key,
                progress=functools.partial(progress, scenario.name) if progress else None))
            measured.runs.append(result)
            if not server.is_alive():
                measured.error = f"the server died during {scenario.name}"
                break
    finally:
        engine.stop(server)
    return measured
