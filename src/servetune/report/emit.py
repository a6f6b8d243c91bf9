"""The winning config, ready to paste: the engine's launch line (`vllm serve`, SGLang's `python3 -m
sglang.launch_server`), a docker compose service and a Kubernetes container.

The engine's face comes from its profile (engine/profile.py: launch words, model flag, image,
entrypoint, port). All three carry exactly the flags servetune launched (through the engine's
rendering), minus what only made sense for a local trial server (host, port, the model given as a
flag). Secrets are passed by name only: `serve.sh` requires them from the caller's environment,
compose lists the bare name (taken from the shell), Kubernetes reads a Secret. Everything written as
shell is shlex-quoted, and variable names are checked, since a name is written unquoted (`export
NAME=...`).

The image is the one measured: a docker-run study's image, pinned by its registry digest when docker
knows one; else a release's published image (`vllm/vllm-openai:vX.Y.Z`, `lmsysorg/sglang:vX.Y.Z`). A
development build (`0.19.1rc1.dev231+g9dd5ee011`) has no published tag, so none is derived from its
version: the image is a placeholder docker and Kubernetes refuse, and a comment says what to put
there.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ..engine.config import Config, is_env_name, normalize_flag_name
from ..engine.profile import EngineProfile
from ..engine.provenance import ImageRef, parse_build
from ..engine.registry import profile_for
from ..errors import ServetuneError
from ..secrets import flag_value_secret

# Flags servetune sets per trial server (the launcher's host/port; the model goes positional).
_LOCAL_ONLY_FLAGS = frozenset({"host", "port", "model"})
# Not a valid image reference (upper case): nothing is pulled in place of the image measured.
IMAGE_PLACEHOLDER = "REPLACE-WITH-THE-MEASURED-IMAGE"
K8S_SECRET = "servetune-secrets"  # the Kubernetes Secret the container's secret variables come from


@dataclass(frozen=True)
class Deployment:
    """What every emitted form is made of."""

    model: str
    flags: dict[str, Any]
    env: dict[str, str]
    engine_version: str | None = None
    secret_env: tuple[str, ...] = field(default=())  # names only: values never reach an emitted file
    measured_image: ImageRef | None = None  # the docker image the study ran (tune/provenance.py)
    kind: str = "vllm"  # the engine measured (engine/registry.py)

    def __post_init__(self) -> None:
        bad = [n for n in [*self.env, *self.secret_env] if not is_env_name(n)]
        if bad:
            raise ServetuneError(f"cannot emit the config: {bad[0]!r} is not an environment variable name")

    @classmethod
    def of(cls, config: Config, engine: dict[str, Any] | None = None, engine_version: str | None = None,
           measured_image: ImageRef | None = None) -> Deployment:
        """`config` as a trial launched it (study args with the parameters laid over), `engine` the
        study spec's engine section it ran on (for the kind, the model and the secrets' names). A
        secret flag (vLLM's `api-key`) becomes its variable's name (VLLM_API_KEY), its value is dropped."""
        engine = engine or {}
        kind = str(engine.get("kind") or "vllm")
        profile = profile_for(kind)
        local = {*_LOCAL_ONLY_FLAGS, *(f.lstrip("-") for f in [profile.deployment.model_flag] if f)}
        flags: dict[str, Any] = {}
        secrets = [str(n) for n in engine.get("secret_env") or []]
        for name, value in config.flags.items():
            norm = normalize_flag_name(name)
            if norm in profile.secret_flags and flag_value_secret(value) is not None:
                secrets.append(profile.secret_flags[norm])
            elif norm not in local:
                flags[name] = value
        model = str(engine.get("model") or config.flags.get("model") or "MODEL")
        env = {k: v for k, v in config.env.items() if k not in secrets}
        return cls(model=model, flags=flags, env=env, engine_version=engine_version,
                   secret_env=tuple(dict.fromkeys(secrets)), measured_image=measured_image, kind=kind)

    @property
    def profile(self) -> EngineProfile:
        return profile_for(self.kind)

    @property
    def args(self) -> list[str]:
        """The launch line's arguments: the model (positional or by its flag), then the flags."""
        return self.container_args(self.model)

    def container_args(self, model: str) -> list[str]:
        return [*self.profile.model_args(model), *self.profile.render(self.flags)]

    def container_command(self, model: str) -> list[str]:
        """What the container runs after its image's entrypoint: the arguments alone where the
        entrypoint is the engine's launcher (vLLM's image), else the whole launch line, listening
        on every interface at the container's port."""
        dep = self.profile.deployment
        if dep.entrypoint_takes_args:
            return self.container_args(model)
        return [*dep.launch, *self.container_args(model), "--host", "0.0.0.0", "--port", str(dep.container_port)]

    @property
    def image(self) -> str:
        """The image measured (pinned when docker knows its digest), a release's, or the placeholder."""
        if self.measured_image is not None:
            return self.measured_image.pinned or self.measured_image.reference
        if not self.engine_version:
            return IMAGE_PLACEHOLDER
        build = parse_build(self.engine_version)
        if build.is_dev or not build.release:
            return IMAGE_PLACEHOLDER
        # A release's local label (+cpu) names no tag of its own: the release's image is the nearest.
        dep = self.profile.deployment
        return f"{dep.image}:{dep.image_tag(build.release)}"

    def image_note(self) -> str:
        """Comment lines (`# ...`) that say where the image comes from."""
        image = self.measured_image
        if image is not None:
            if image.pinned:
                return f"# The image measured: {image.reference} ({image.id}), pinned by its registry digest.\n"
            return (f"# The image measured: {image.reference} ({image.id or 'id unknown'}); docker knows no "
                    "registry digest of it here: push it and pin it by digest (image: NAME@sha256:...).\n")
        if not self.engine_version:
            return (f"# The engine's version is unknown: replace {IMAGE_PLACEHOLDER} with the image that was "
                    "measured, pinned by digest.\n")
        build = parse_build(self.engine_version)
        label = self.profile.label
        if self.image == IMAGE_PLACEHOLDER:
            return (f"# Measured: {label} {build.describe()}. No published image tag names this build, "
                    f"so none is derived from its version: replace {IMAGE_PLACEHOLDER} with the image that was "
                    "measured, pinned by digest (image: NAME@sha256:...).\n")
        return (f"# Measured: {label} {build.describe()} outside docker; {self.image} is that release's published "
                "image (pin it by digest for a deployment that cannot move).\n")


def serve_argv(dep: Deployment) -> list[str]:
    return [*dep.profile.deployment.launch, *dep.args]


def require_secrets(dep: Deployment) -> str:
    """Shell lines that stop with a message when a secret is not in the caller's environment (and
    export it, for a shell variable that was set but not exported); the values stay out."""
    return "".join(f': "${{{n}:?set {n} (a secret, read from the environment)}}"\nexport {n}\n'
                   for n in dep.secret_env)


def serve_command(dep: Deployment) -> str:
    """`KEY=value ... vllm serve MODEL --flag value ...` (the engine's launch line), quoted by
    shlex; preceded by the checks
    for the secrets the server needs from the environment, if any."""
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(dep.env.items())]
    return require_secrets(dep) + " ".join([*env, shlex.join(serve_argv(dep))])


def _container_model(model: str) -> tuple[str, list[str]]:
    """A local model directory is mounted read-only into the container; a hub name is used as is."""
    path = Path(model)
    if path.exists():
        target = str(PurePosixPath("/models") / path.resolve().name)
        return target, [f"{path.resolve()}:{target}:ro"]
    return model, []


def compose_service(dep: Deployment, service: str | None = None) -> dict[str, Any]:
    model, volumes = _container_model(dep.model)
    port = dep.profile.deployment.container_port
    spec: dict[str, Any] = {
        "image": dep.image,
        "ipc": "host",
        "ports": [f"{port}:{port}"],
        "command": dep.container_command(model),
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}},
        "volumes": ["~/.cache/huggingface:/root/.cache/huggingface", *volumes],
    }
    if dep.secret_env:
        # The list form: a bare name is taken from the shell that runs `docker compose`.
        spec["environment"] = [*(f"{k}={v}" for k, v in sorted(dep.env.items())), *dep.secret_env]
    elif dep.env:
        spec["environment"] = dict(sorted(dep.env.items()))
    return {"services": {service or dep.profile.deployment.service: spec}}


def compose_yaml(dep: Deployment, service: str | None = None) -> str:
    return dep.image_note() + yaml.safe_dump(compose_service(dep, service), sort_keys=False,
                                             default_flow_style=False, width=1000)


def k8s_container(dep: Deployment, name: str | None = None) -> dict[str, Any]:
    model, _ = _container_model(dep.model)
    port = dep.profile.deployment.container_port
    container: dict[str, Any] = {"name": name or dep.profile.deployment.service, "image": dep.image}
    if dep.profile.deployment.entrypoint_takes_args:
        container["args"] = dep.container_command(model)
    else:
        container["command"] = dep.container_command(model)
    container |= {
        "ports": [{"containerPort": port, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}},
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(dep.env.items())]
    env += [{"name": n, "valueFrom": {"secretKeyRef": {"name": K8S_SECRET, "key": k8s_secret_key(n)}}}
            for n in dep.secret_env]
    if env:
        container["env"] = env
    return container


def k8s_secret_key(name: str) -> str:
    """HF_TOKEN -> hf-token: the key of the variable's value in the Kubernetes Secret."""
    return name.lower().replace("_", "-")


def k8s_yaml(dep: Deployment, name: str | None = None) -> str:
    """A `containers:` entry to paste into a Deployment's pod template (after a comment saying
    which Secret to create, when the container needs one)."""
    text = dep.image_note() + yaml.safe_dump({"containers": [k8s_container(dep, name)]}, sort_keys=False,
                                             width=1000)
    if not dep.secret_env:
        return text
    literals = " ".join(f"--from-literal={k8s_secret_key(n)}=..." for n in dep.secret_env)
    return (f"# The secret variables come from the Secret {K8S_SECRET!r}; create it first:\n"
            f"#   kubectl create secret generic {K8S_SECRET} {literals}\n{text}")


@dataclass(frozen=True)
class Snippets:
    command: str
    compose: str
    kubernetes: str
    launcher: str = "vllm serve"  # the launch line's words before the model, as a heading names it


def snippets(dep: Deployment) -> Snippets:
    return Snippets(command=serve_command(dep), compose=compose_yaml(dep), kubernetes=k8s_yaml(dep),
                    launcher=" ".join(dep.profile.deployment.launch))


def write_snippets(dep: Deployment, out_dir: Path) -> dict[str, Path]:
    """`serve.sh`, `docker-compose.yaml`, `k8s-container.yaml` and `config.json` under `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    s = snippets(dep)
    paths = {
        "command": out_dir / "serve.sh",
        "compose": out_dir / "docker-compose.yaml",
        "kubernetes": out_dir / "k8s-container.yaml",
        "config": out_dir / "config.json",
    }
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(dep.env.items()))
    # One comment line: the version comes from a log line, but a line break in it must not end the comment.
    measured = (f"# Measured with {dep.profile.label} {' '.join(parse_build(dep.engine_version).describe().split())}\n"
                if dep.engine_version else "")
    script = "#!/bin/sh\n" + measured + require_secrets(dep) + exports + "exec " + shlex.join(serve_argv(dep)) + "\n"
    paths["command"].write_text(script)
    paths["compose"].write_text(s.compose)
    paths["kubernetes"].write_text(s.kubernetes)
    config = {**Config(flags=dep.flags, env=dep.env).model_dump(mode="json"), "secret_env": list(dep.secret_env)}
    paths["config"].write_text(json.dumps(config, indent=2) + "\n")
    return paths
