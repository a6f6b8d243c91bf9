"""What an engine kind is, known without building one: its name in messages, the features only
some engines have, the study args it sets itself, its secret flags, and how its server is
deployed (launch line, image, container).

Every engine class carries one (`profile`); the study spec, `plan`, the commands and the emitted
deployment ask the registry for a kind's profile (`engine.registry.profile_for`) instead of
knowing an engine's vocabulary themselves."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import ServetuneError
from .config import FlagValue, render_flags


class Capability(StrEnum):
    """Features that rest on one engine's behaviour; an engine declares those it has."""

    context_probe = "context probe"  # `probe context`: vLLM's automatic max-model-len and estimates
    utilization_probe = "utilization probe"  # `probe utilization`: vLLM's free-memory check
    memory_probe = "memory probe"  # `probe memory`: the answer is a --kv-cache-memory-bytes
    speculative_sweep = "speculative sweep"  # a space over `speculative-config` (engine/speculative.py)
    block_pool_replay = "block-pool replay"  # a trace's prefix hits replayed on the boot's KV block pool
    init_from_serve_line = "init from a serve line"  # `init --from-serve 'vllm serve ...'`
    engine_core_pinning = "EngineCore pinning"  # `pin_engine_core`: vLLM's CPU build's busy-waiting EngineCore


@dataclass(frozen=True)
class DeploymentStyle:
    """How a measured config of this engine is deployed."""

    launch: tuple[str, ...]  # the launch line's words before the model (`vllm serve`)
    model_flag: str | None  # None: the model goes positional; else the flag that takes it
    image: str  # the release images' repository
    image_tag: Callable[[str], str]  # release "0.5.15" -> its tag
    # The image's entrypoint takes only the arguments (vLLM's is `vllm serve`); else the container's
    # command is the whole launch line.
    entrypoint_takes_args: bool
    service: str  # the compose service's and the container's name
    container_port: int


@dataclass(frozen=True)
class PoolFlags:
    """The flags that size an engine's KV pool and bound its batch, as the report's advice names them."""

    share: str  # the share of GPU memory for weights and the pool (vLLM: gpu-memory-utilization)
    grow: tuple[str, ...]  # every flag that makes the pool larger, `share` first
    batch_limit: str  # requests run at once (vLLM: max-num-seqs)
    context: str  # one request's longest context, which does not size the pool (vLLM: max-model-len)


@dataclass(frozen=True)
class EngineProfile:
    kind: str  # the study's `engine.kind`
    label: str  # how messages and reports name it ("vLLM")
    capabilities: frozenset[Capability]
    deployment: DeploymentStyle
    pool: PoolFlags
    default_command: tuple[str, ...]  # the base command a study or command gets when it names none
    package: str  # the Python package whose entry point runs it (`python -m PACKAGE...`, a `PACKAGE` script)
    # Its own entry point must answer for its defaults: `plan` refuses a study that runs it there
    # and cannot read them (else a study runs without them, as where the engine is not installed).
    defaults_required: bool = False
    # The variable its CPU build takes a slot's cores in (it binds its OpenMP threads itself);
    # None: a slot's cores are the server's CPU affinity only.
    cpu_bind_env: str | None = None
    # Args a study must not set, as they come from dedicated fields: normalized flag -> the field.
    reserved_args: Mapping[str, str] = field(default_factory=dict)
    # Flags whose value is a secret -> the variable the engine reads instead (the value leaves
    # argv for the environment). An engine with no such variable for a flag lists it in
    # `argv_secret_flags`: a study may not give it a value (it would sit in argv, seen by `ps`).
    secret_flags: Mapping[str, str] = field(default_factory=dict)
    argv_secret_flags: frozenset[str] = frozenset()
    render: Callable[[dict[str, FlagValue]], list[str]] = render_flags  # a Config's flags as argv
    # `init`'s space for this engine, (flag, values, why); empty: study/draft.py's own (vLLM's,
    # which reads the model and the hardware)
    init_space: tuple[tuple[str, tuple[FlagValue, ...], str], ...] = ()

    def supports(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def require(self, capability: Capability, where: str = "") -> None:
        """ServetuneError in one line when this engine lacks `capability`."""
        if capability not in self.capabilities:
            prefix = f"{where}: " if where else ""
            raise ServetuneError(f"{prefix}{capability.value} is not supported for {self.kind}")

    def is_secret_flag(self, flag: str) -> bool:
        return flag in self.secret_flags or flag in self.argv_secret_flags

    def model_args(self, model: str) -> list[str]:
        return [model] if self.deployment.model_flag is None else [self.deployment.model_flag, model]
