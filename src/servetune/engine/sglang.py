"""SGLang: `python -m sglang.launch_server`, started and stopped in its own process group like any
server engine (server_engine.py), its log read by sglang_log.py, its prefix cache emptied between
runs through `/flush_cache`, its deployment an SGLang launch line and the `lmsysorg/sglang` image.

SGLang's switches are `store_true` flags (`--disable-radix-cache`): a true value renders the flag,
a false one leaves it out (its default), never a `--no-` form, which SGLang's parser refuses.
"""

from __future__ import annotations

import os

from .. import server_http
from ..vocabulary import SGLANG_METRIC_NAMES
from .applied import AppliedMismatch
from .bootfacts import BootFacts
from .cache import CacheDirs
from .classify import Failure
from .config import Config, FlagValue, normalize_flag_name, render_flags
from .defaults import PARSER_REPORT, EngineDefaults, read_engine_defaults
from .placement import Placement
from .profile import DeploymentStyle, EngineProfile, PoolFlags
from .registry import register_engine
from .server_engine import ServerEngine
from .sglang_log import check_sglang_applied, classify_sglang_failure, parse_sglang_boot

DEFAULT_COMMAND = ["python", "-m", "sglang.launch_server"]
_LAUNCHER_FLAGS = {"host", "port", "model-path", "model"}

# Runs in the engine's interpreter (engine/defaults.py): SGLang's parser is ServerArgs.add_cli_args.
_DEFAULTS_PROBE = r"""
import argparse, importlib.util, json, sys
import sglang
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
flag_parser = parser
version = getattr(sglang, "__version__", None)
""" + PARSER_REPORT


def render_sglang_flags(flags: dict[str, FlagValue]) -> list[str]:
    """Flags as SGLang's argv: a false switch is its default, so it is left out."""
    return render_flags({k: v for k, v in flags.items() if v is not False})


def _release_tag(release: str) -> str:
    return f"v{release}"


# The flags that matter for SGLang's throughput and latency, for `init`'s space: (flag, values, why).
INIT_SPACE: tuple[tuple[str, tuple[FlagValue, ...], str], ...] = (
    ("chunked-prefill-size", (2048, 16384), "the prefill chunk (default 8192 on large GPUs): smaller keeps "
     "decode streams smooth, larger finishes prompts sooner"),
    ("max-running-requests", (128, 512), "requests the scheduler runs at once (default: what the KV pool holds)"),
    ("mem-fraction-static", (0.85, 0.92), "the share of GPU memory for weights and the KV pool (default by GPU "
     "size): more holds more requests, less leaves room for activations and CUDA graphs"),
    ("schedule-policy", ("lpm", "fcfs"), "which waiting request runs next: longest prefix match reuses the "
     "radix cache, first come first served is fair"),
    ("cuda-graph-max-bs", (64, 256), "the largest batch decoded as a CUDA graph: larger graphs cost memory"),
    ("attention-backend", ("flashinfer", "fa3"), "the attention kernels (default by GPU and model)"),
    ("disable-radix-cache", (True,), "no prefix cache: saves its bookkeeping when prompts share nothing"),
)

PROFILE = EngineProfile(
    kind="sglang", label="SGLang",
    default_command=tuple(DEFAULT_COMMAND),
    package="sglang",  # its defaults are read where it is installed; no SGLang build runs on CPUs
    capabilities=frozenset(),  # the probes, the speculative sweep, block-pool replay and init rest on vLLM's ways
    deployment=DeploymentStyle(launch=("python3", "-m", "sglang.launch_server"), model_flag="--model-path",
                               image="lmsysorg/sglang", image_tag=_release_tag, entrypoint_takes_args=False,
                               service="sglang", container_port=30000),
    pool=PoolFlags(share="mem-fraction-static", grow=("mem-fraction-static", "max-total-tokens"),
                   batch_limit="max-running-requests", context="context-length"),
    reserved_args={"model-path": "engine.model", "model": "engine.model", "port": "engine.port",
                   "served-model-name": "engine.served_model_name"},
    argv_secret_flags=frozenset({"api-key"}),  # SGLang reads its key from argv only
    render=render_sglang_flags,
    init_space=INIT_SPACE,
)


@register_engine("sglang")
class SglangEngine(ServerEngine):
    """Starts SGLang servers from Configs. `command` is the base command without model and flags
    (default `python -m sglang.launch_server`; a bare python is the interpreter servetune runs in);
    the model goes to `--model-path`."""

    profile = PROFILE
    metric_names = SGLANG_METRIC_NAMES
    _version: str | None = None  # read with the defaults: SGLang's log does not say it

    def build_command(self, config: Config, port: int, cache: CacheDirs | None = None) -> list[str]:
        flags = {k: v for k, v in config.flags.items() if normalize_flag_name(k) not in _LAUNCHER_FLAGS}
        # /metrics is off unless asked: servetune reads the server's side of every run from it.
        flags.setdefault("enable-metrics", True)
        return [*self.base_command(), "--model-path", self.model, *render_sglang_flags(flags),
                "--host", self.host, "--port", str(port)]

    def environment(self, config: Config, placement: Placement | None = None,
                    cache: CacheDirs | None = None) -> dict[str, str]:
        """servetune's environment, the slot's GPUs, the Config's variables, the study's cache roots
        and its secrets. Raises ServetuneError naming a secret that is set nowhere."""
        place = placement.env if placement is not None else {}
        caches = cache.env() if cache is not None else {}
        return {**os.environ, **place, **config.env, **caches, **self.secrets.resolve(os.environ)}

    def client_api_key(self, config: Config) -> str | None:
        return self.flag_value(config, "api-key")

    def parse_boot(self, text: str) -> BootFacts:
        facts = parse_sglang_boot(text)
        facts.engine_version = self._version
        return facts

    def check_applied(self, config: Config, facts: BootFacts) -> list[AppliedMismatch]:
        return check_sglang_applied(config, facts)

    def classify(self, log_tail: str, exit_code: int | None) -> Failure:
        return classify_sglang_failure(log_tail, exit_code)

    def read_defaults(self) -> EngineDefaults:
        """SGLang's argument defaults and flags, from its parser in the command's interpreter."""
        found = read_engine_defaults(self.command, PROFILE, _DEFAULTS_PROBE)
        self._version = found.version
        return found

    def before_run(self, url: str, api_key: str | None) -> None:
        """Empty the radix (prefix) cache: runs must not hit each other's prompts."""
        if self.dev_mode:
            flush_cache(url, api_key)


def flush_cache(url: str, api_key: str | None) -> bool:
    """POST /flush_cache; False when the server refuses (requests still running) or does not answer."""
    try:
        return server_http.post(f"{url}/flush_cache", api_key) == 200
    except server_http.ServerAnswerError:
        return False
