"""What every engine that runs as an OpenAI-compatible server process shares: start it in its own
process group on a free port, wait while its boot log moves, read the boot back, stop it and
everything it started, mask secrets. An engine module subclasses `ServerEngine` and supplies its
own faces: the command line, the environment, its log's facts, the applied check and its
failure classes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Self

from ..secrets import Redactor, Secrets
from ..vocabulary import MetricNames, Outcome
from .applied import AppliedMismatch
from .base import StartResult
from .boot_progress import BootProgress
from .bootfacts import BootFacts
from .cache import CacheDirs
from .classify import Failure, tail
from .config import Config, normalize_flag_name
from .cpu_layout import CoreLayout, pin_engine_core
from .defaults import EngineDefaults, in_container
from .knobs import DeclaredEvidence, KnobEvidence
from .launch import HealthWait, Server, StopReport, launch, terminate, wait_healthy
from .placement import Placement
from .ports import LOOPBACK, free_port, port_is_free
from .profile import EngineProfile

if TYPE_CHECKING:
    from ..study.spec import EngineSpec


class ServerEngine:
    """The launch and teardown of one engine's servers; subclasses give its faces."""

    profile: EngineProfile
    metric_names: MetricNames

    def __init__(
        self,
        command: list[str] | None = None,
        model: str = "",
        startup_timeout_s: float = 3600.0,
        log_dir: Path | str = Path("runs/logs"),
        grace_s: float = 20.0,
        host: str = LOOPBACK,
        pin_engine_core: bool = False,
        secrets: Secrets | None = None,
        dev_mode: bool = False,
        evidence: dict[str, DeclaredEvidence] | None = None,
        startup_stall_s: float = 600.0,
    ) -> None:
        self.command = list(command or self.default_command())
        self.model = str(model)
        self.startup_timeout_s = startup_timeout_s  # the cap of a boot whose log keeps moving
        self.startup_stall_s = startup_stall_s  # a boot whose log stops moving this long has failed
        self.log_dir = Path(log_dir)
        self.grace_s = grace_s
        self.host = host
        self.pin_engine_core = pin_engine_core  # CPU build on few cores: see cpu_layout
        self.secrets = secrets or Secrets()
        self.dev_mode = dev_mode  # the tuner's servers: caches emptied between runs where that needs a mode
        self.evidence = dict(evidence or {})  # the study's evidence for knobs no rule knows (engine/knobs.py)
        # Masks secret values in what servetune writes; rebuilt from each launch's environment.
        self._redact = Redactor.for_environment({**os.environ, **self.secrets.literal}, self.secrets.names)

    @property
    def name(self) -> str:
        return self.profile.kind

    @classmethod
    def default_command(cls) -> list[str]:
        return list(cls.profile.default_command)

    @classmethod
    def from_spec(cls, spec: EngineSpec) -> Self:
        """The tuner's engine: its servers run in dev mode, so caches are emptied between runs."""
        return cls(command=list(spec.command), model=str(spec.model), startup_timeout_s=spec.startup_timeout_s,
                   startup_stall_s=spec.startup_stall_s, pin_engine_core=spec.pin_engine_core, secrets=spec.secrets,
                   dev_mode=True, evidence=dict(spec.evidence))

    # -- faces an engine module gives ------------------------------------------------------
    def build_command(self, config: Config, port: int, cache: CacheDirs | None = None) -> list[str]:
        raise NotImplementedError

    def environment(self, config: Config, placement: Placement | None = None,
                    cache: CacheDirs | None = None) -> dict[str, str]:
        raise NotImplementedError

    def parse_boot(self, text: str) -> BootFacts:
        raise NotImplementedError

    def check_applied(self, config: Config, facts: BootFacts) -> list[AppliedMismatch]:
        raise NotImplementedError

    def classify(self, log_tail: str, exit_code: int | None) -> Failure:
        raise NotImplementedError

    def knob_evidence(self, config: Config, text: str, facts: BootFacts, server: Server) -> list[KnobEvidence]:
        return []

    def client_api_key(self, config: Config) -> str | None:
        raise NotImplementedError

    def read_defaults(self) -> EngineDefaults:
        raise NotImplementedError

    def before_run(self, url: str, api_key: str | None) -> None:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    def base_command(self) -> list[str]:
        base = list(self.command)
        if base and base[0] in ("python", "python3"):
            base[0] = sys.executable
        return base

    def is_docker(self) -> bool:
        return in_container(self.command)

    def check_secrets(self) -> None:
        """Raise ServetuneError now, before any boot, when a secret of the study is not set."""
        self.secrets.resolve(os.environ)

    def redact(self, text: str) -> str:
        """`text` with the secret values of the last launch (and of servetune's environment) masked."""
        return self._redact(text)

    def flag_value(self, config: Config, flag: str) -> str | None:
        """A flag's value in `config` (the first of a list), None when absent or empty."""
        value = next((v for k, v in config.flags.items() if normalize_flag_name(k) == flag), None)
        if isinstance(value, list):
            value = value[0] if value else None
        return str(value) if value not in (None, "", False) else None

    def served_model_name(self, config: Config) -> str:
        return self.flag_value(config, "served-model-name") or self.model

    def start(self, config: Config, log_path: Path | None = None, port: int | None = None,
              on_spawn: Callable[[Server], None] | None = None, launch_token: str | None = None,
              placement: Placement | None = None, cache: CacheDirs | None = None) -> StartResult:
        """Start a server and wait until it is healthy. Never raises for a failed start.

        `on_spawn` sees the process before the (long) health wait, so a caller can record its
        pid: if the caller is killed while waiting, a later run can still find and stop it.
        `launch_token` (recorded by the caller before this call) marks the server's environment,
        which covers a kill before `on_spawn` (see launch.py). `placement` puts the server on a
        slot's GPUs or CPUs (engine/placement.py); `cache` gives it the study's cache roots
        (engine/cache.py). A secret that is set nowhere is a ServetuneError, raised before anything starts. Log
        text in the result (tail, details, boot facts) has the launch's secret values masked."""
        if port is not None and not port_is_free(port, self.host):
            return StartResult(outcome=Outcome.port_in_use, detail=f"port {port} on {self.host} is already in use")
        log_path = log_path or self.log_dir / f"{self.name}-{config.key()}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        result = self._start_once(config, log_path, port or free_port(self.host), on_spawn, launch_token, placement,
                                  cache)
        if result.outcome is Outcome.port_in_use and port is None:
            # Another process took the free port between our probe and the server's bind: try once more.
            result = self._start_once(config, log_path, free_port(self.host), on_spawn, launch_token, placement,
                                      cache)
        return result

    def _start_once(self, config: Config, log_path: Path, port: int,
                    on_spawn: Callable[[Server], None] | None, launch_token: str | None,
                    placement: Placement | None, cache: CacheDirs | None) -> StartResult:
        argv = self.build_command(config, port, cache)
        env = self.environment(config, placement, cache)
        self._redact = Redactor.for_environment(env, self.secrets.names)
        try:
            server = launch(argv, env, log_path, port, self.host, launch_token=launch_token,
                            redact=self._redact, cpus=placement.cpus if placement is not None else None)
        except OSError as exc:
            return StartResult(outcome=Outcome.crashed, detail=f"cannot run {argv[0]!r}: {exc}",
                               log_path=log_path, argv=argv)
        try:
            if on_spawn is not None:
                on_spawn(server)
            progress = BootProgress(log_path)
            state = wait_healthy(server, self.startup_timeout_s, progress=progress, stall_s=self.startup_stall_s)
        except BaseException:  # Ctrl-C or SIGTERM while booting: leave nothing behind
            self.stop(server)
            raise
        text = self.redact(read_log(log_path))
        facts = self.parse_boot(text)
        facts.startup_seconds = server.startup_seconds
        if state is HealthWait.healthy:
            layout = pin_engine_core(server.pgid, server.pid) if self.pin_engine_core else CoreLayout("")
            return StartResult(outcome=Outcome.ok, server=server, mismatches=self.check_applied(config, facts),
                               knobs=self.knob_evidence(config, text, facts, server),
                               detail=f"healthy after {server.startup_seconds:.1f} s", cpu_layout=layout.detail,
                               client_cpus=layout.client_cpus,
                               boot_facts=facts, log_path=log_path, argv=argv)
        exit_code = server.exit_code()
        # also after an exit: children (the engine core) may outlive the API server
        left = self.stop(server).problem()
        text = self.redact(read_log(log_path))
        if state in (HealthWait.timeout, HealthWait.stalled):
            detail = (f"the boot log stopped moving for {self.startup_stall_s:.0f} s while {progress.where()}"
                      if state is HealthWait.stalled else
                      f"not healthy within {self.startup_timeout_s:.0f} s, the log still moving, "
                      f"{progress.where()}")
            return StartResult(outcome=Outcome.startup_timeout, log_tail=tail(text),
                               detail="; ".join(x for x in (detail, left) if x),
                               boot_facts=facts, log_path=log_path, argv=argv)
        failure = self.classify(tail(text, 400), exit_code)
        return StartResult(outcome=failure.outcome, detail="; ".join(x for x in (failure.detail, left) if x),
                           evidence=failure.evidence,
                           estimated_max_model_len=failure.estimated_max_model_len,
                           free_memory_share=failure.free_memory_share,
                           log_tail=tail(text), boot_facts=facts, log_path=log_path, argv=argv)

    def stop(self, server: Server) -> StopReport:
        return terminate(server, grace_s=self.grace_s)

    def diagnose(self, server: Server) -> Failure:
        """Why a server that was healthy has died (call after `server.check()` says crashed).
        The outcome stays `crashed` for the runner; the detail names the cause (e.g. oom)."""
        found = self.classify(tail(self.redact(read_log(server.log_path)), 400), server.exit_code())
        if found.outcome is Outcome.crashed:
            return found
        return Failure(outcome=Outcome.crashed, detail=f"crashed ({found.outcome.value}): {found.detail}",
                       evidence=found.evidence)


def read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
