"""What every engine (vLLM, SGLang) offers the runner and the CLI.

A new engine is one module with a class that satisfies `Engine` and one registration
(`@register_engine("kind")` from engine/registry.py); a study selects it with `engine: {kind: ...}`.
Everything that differs between engines (command line, environment, boot log, failure classes,
the applied check, /metrics names, what to do between runs, its `EngineProfile`: features,
reserved and secret flags, deployment) lives behind this protocol; `server_engine.py` holds what
engines that run as a server process share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..vocabulary import MetricNames, Outcome
from .applied import AppliedMismatch
from .bootfacts import BootFacts
from .cache import CacheDirs
from .classify import Failure
from .config import Config
from .defaults import EngineDefaults
from .knobs import KnobEvidence
from .launch import Server, StopReport
from .placement import Placement
from .profile import EngineProfile


class StartResult(BaseModel):
    """The result of starting one server. A failed start is a result, never an exception."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    outcome: Outcome
    server: Server | None = None  # set only when outcome is ok: the caller must stop it
    boot_facts: BootFacts = Field(default_factory=BootFacts)
    mismatches: list[AppliedMismatch] = Field(default_factory=list)
    knobs: list[KnobEvidence] = Field(default_factory=list)  # each env knob: applied, not applied or unproven
    detail: str = ""
    log_tail: str = ""
    evidence: list[str] = Field(default_factory=list)  # log lines behind a failure verdict
    estimated_max_model_len: int | None = None  # context_too_long: what vLLM says would fit
    free_memory_share: float | None = None  # oom at start-up: free / total device memory vLLM found
    log_path: Path | None = None
    argv: list[str] = Field(default_factory=list)
    cpu_layout: str = ""  # what pinning did, when the engine was asked to pin (cpu_layout.py)
    client_cpus: frozenset[int] | None = None  # where the load client should run (cpu_layout.client_cores)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.ok


class Engine(Protocol):
    @property
    def name(self) -> str: ...  # its kind

    @property
    def profile(self) -> EngineProfile: ...  # what the kind is: features, reserved and secret flags, deployment

    @property
    def metric_names(self) -> MetricNames: ...  # its /metrics families -> servetune's neutral keys

    def build_command(self, config: Config, port: int) -> list[str]: ...

    def start(self, config: Config, log_path: Path | None = None, port: int | None = None,
              on_spawn: Callable[[Server], None] | None = None, launch_token: str | None = None,
              placement: Placement | None = None, cache: CacheDirs | None = None) -> StartResult: ...

    def stop(self, server: Server) -> StopReport: ...

    def diagnose(self, server: Server) -> Failure: ...  # why a server that was healthy died

    def client_api_key(self, config: Config) -> str | None: ...  # what clients of its server send

    def served_model_name(self, config: Config) -> str: ...  # the model name its clients ask for

    def check_secrets(self) -> None: ...  # ServetuneError before any boot when a secret is not set

    def redact(self, text: str) -> str: ...  # secret values of the last launch masked

    def before_run(self, url: str, api_key: str | None) -> None: ...  # between runs (a cache reset)

    def read_defaults(self) -> EngineDefaults: ...  # its argument defaults, once per study
