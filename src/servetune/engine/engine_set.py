"""Engines compared in one study: one `Engine` over the study's engine sections, each config
started on the section its `Config.engine` names (None: the study's `engine`), so the runner,
its trials and the analysis treat a comparison like any study (same scenarios, same statistics).

A server is stopped, diagnosed and emptied between runs by the engine that started it; /metrics
are read with every section's families (their names differ by prefix)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import reduce
from pathlib import Path

from ..vocabulary import MetricNames
from .base import Engine, StartResult
from .cache import CacheDirs
from .classify import Failure
from .config import Config
from .defaults import EngineDefaults
from .launch import Server, StopReport
from .placement import Placement
from .profile import EngineProfile


class EngineSet:
    def __init__(self, main: Engine, others: Mapping[str, Engine]) -> None:
        self.main = main
        self.engines: dict[str | None, Engine] = {None: main, main.name: main}
        self.engines.update(others)
        self._by_url: dict[str, Engine] = {}  # a started server's URL -> its engine

    @property
    def name(self) -> str:
        return self.main.name

    @property
    def profile(self) -> EngineProfile:
        return self.main.profile

    @property
    def metric_names(self) -> MetricNames:
        names = [e.metric_names for k, e in self.engines.items() if k is not None]
        return reduce(lambda a, b: a.merged(b), names)

    def of(self, config: Config) -> Engine:
        return self.engines[config.engine]

    @staticmethod
    def _own(config: Config) -> Config:
        """What the chosen engine is given: its flags and variables, the choice itself left out."""
        return Config(flags=config.flags, env=config.env)

    def build_command(self, config: Config, port: int) -> list[str]:
        return self.of(config).build_command(self._own(config), port)

    def start(self, config: Config, log_path: Path | None = None, port: int | None = None,
              on_spawn: Callable[[Server], None] | None = None, launch_token: str | None = None,
              placement: Placement | None = None, cache: CacheDirs | None = None) -> StartResult:
        engine = self.of(config)
        result = engine.start(self._own(config), log_path, port, on_spawn, launch_token, placement, cache)
        if result.server is not None:
            self._by_url[result.server.url] = engine
        return result

    def _server_engine(self, server: Server) -> Engine:
        return self._by_url.get(server.url, self.main)

    def stop(self, server: Server) -> StopReport:
        report = self._server_engine(server).stop(server)
        self._by_url.pop(server.url, None)
        return report

    def diagnose(self, server: Server) -> Failure:
        return self._server_engine(server).diagnose(server)

    def client_api_key(self, config: Config) -> str | None:
        return self.of(config).client_api_key(self._own(config))

    def served_model_name(self, config: Config) -> str:
        return self.of(config).served_model_name(self._own(config))

    def check_secrets(self) -> None:
        for kind, engine in self.engines.items():
            if kind is not None:
                engine.check_secrets()

    def redact(self, text: str) -> str:
        return reduce(lambda t, e: e.redact(t), [e for k, e in self.engines.items() if k is not None], text)

    def before_run(self, url: str, api_key: str | None) -> None:
        self._by_url.get(url, self.main).before_run(url, api_key)

    def read_defaults(self) -> EngineDefaults:
        """The study's engine's: the other sections' flags are checked by their own boots."""
        return self.main.read_defaults()

