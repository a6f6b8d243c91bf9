"""An engine that boots nothing and counts: every start hands out a fake streaming server (or a
failure) with chosen BootFacts; and a StudyRunner study around it."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from typing import Any

from rich.console import Console

from servetune.analysis import known
from servetune.engine.base import StartResult
from servetune.engine.classify import Failure
from servetune.engine.config import Config
from servetune.engine.defaults import EngineDefaults
from servetune.engine.launch import Server, StopReport
from servetune.store import StudyStore
from servetune.study.spec import StudySpec
from servetune.tune.display import StudyDisplay
from servetune.tune.runner import StudyRunner
from servetune.vocabulary import VLLM_METRIC_NAMES, Outcome
from tests.fakes import MODEL_WITHOUT_WEIGHTS
from tests.fakes.launch import fake_server

CPU_DEFAULTS = EngineDefaults(known=True, source="test", values={"load-format": "auto"})


class CountingEngine:
    """Boots nothing: every start hands out the fake server with BootFacts from `facts_for`."""

    name = "counting"
    metric_names = VLLM_METRIC_NAMES  # the fake server speaks vLLM's /metrics

    def __init__(self, url: str, facts_for, fails_for=lambda config: None, url_for=None):
        self.url = url
        self.facts_for = facts_for
        self.fails_for = fails_for
        self.url_for = url_for or (lambda config: self.url)  # which fake server a config's "boot" answers on
        self.started: list[Config] = []
        self.placements: list[object] = []
        self.stopped = 0
        self.runs_started = 0
        self._lock = threading.Lock()  # slots start and stop from their own threads

    def start(self, config: Config, log_path: Path, port: int | None = None, on_spawn=None,
              launch_token: str | None = None, placement=None, cache=None) -> StartResult:
        with self._lock:
            self.started.append(config)
            self.placements.append(placement)
        log_path.write_text("")
        failure = self.fails_for(config)
        if failure is not None:
            return StartResult(outcome=failure, detail=f"fake {failure}")
        url = self.url_for(config)
        server = Server(url=url, port=int(url.rsplit(":", 1)[1]), pid=1, pgid=1, create_time=0.0,
                        log_path=log_path, started_at=0.0, launch_token=launch_token)
        return StartResult(outcome=Outcome.ok, server=server, boot_facts=self.facts_for(config))

    def client_api_key(self, config: Config) -> str | None:
        return None

    def stop(self, server: Server) -> StopReport:
        with self._lock:
            self.stopped += 1
        return StopReport(left_pids=[], port_free=True, forced=False, port=server.port)

    def redact(self, text: str) -> str:
        return text

    def check_secrets(self) -> None:
        pass

    def read_defaults(self) -> EngineDefaults:
        return CPU_DEFAULTS

    def before_run(self, url: str, api_key: str | None) -> None:
        self.runs_started += 1

    def build_command(self, config: Config, port: int) -> list[str]:
        return []

    def diagnose(self, server: Server) -> Failure:
        return Failure(outcome=Outcome.crashed, detail="the fake server went away", evidence=[])


def spec(tmp_path: Path, args: dict[str, Any], space: dict[str, Any], model: Path | None = None) -> StudySpec:
    return StudySpec.model_validate({
        "name": "boots",
        "engine": {"command": [sys.executable, "-c", "raise SystemExit(3)"], "model": str(model or MODEL_WITHOUT_WEIGHTS),
                   "args": args},
        "space": space,
        "scenarios": [{"name": "s", "input_len": 8, "output_len": 4, "num_prompts": 2, "warmups": 0}],
        "strategy": "grid", "replicates": 1, "finalists": 0, "budget": {"trials": 6},
    })


def tune(tmp_path: Path, spec: StudySpec, engine_for) -> tuple[CountingEngine, StudyStore]:
    out = tmp_path / "study"
    with fake_server(ttft_ms=1, itl_ms=1) as url:
        runner = StudyRunner(spec, out, display=StudyDisplay(Console(file=io.StringIO()), enabled=False))
        runner.store.set_meta_json(known.DEFAULTS_META, CPU_DEFAULTS.model_dump(mode="json"))  # no vLLM here
        engine = engine_for(url)
        runner.engine = runner.executor.engine = engine
        runner.run()
    return engine, runner.store
