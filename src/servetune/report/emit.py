"""The winning config, ready to paste: a `vllm serve` command line, a docker compose service and
Kubernetes container args/env.

All three carry exactly the flags servetune launched (through `render_flags`), minus what only
made sense for a local trial server (host, port, the model given as a flag).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from ..engine.config import Config, normalize_flag_name, render_flags

# Flags servetune sets per trial server (the launcher's host/port; the model goes positional).
_LOCAL_ONLY_FLAGS = frozenset({"host", "port", "model"})
CONTAINER_PORT = 8000
DEFAULT_IMAGE = "vllm/vllm-openai"


@dataclass(frozen=True)
class Deployment:
    """What every emitted form is made of."""

    model: str
    flags: dict[str, Any]
    env: dict[str, str]
    vllm_version: str | None = None

    @classmethod
    def of(cls, config: Config, engine: dict[str, Any] | None = None, vllm_version: str | None = None) -> Deployment:
        """`config` as a trial launched it (study args with the parameters laid over), `engine` the
        study spec's engine section (for the model)."""
        engine = engine or {}
        flags = {k: v for k, v in config.flags.items() if normalize_flag_name(k) not in _LOCAL_ONLY_FLAGS}
        model = str(engine.get("model") or config.flags.get("model") or "MODEL")
        return cls(model=model, flags=flags, env=dict(config.env), vllm_version=vllm_version)

    @property
    def args(self) -> list[str]:
        """`vllm serve` arguments: the model, then the flags."""
        return [self.model, *render_flags(self.flags)]

    @property
    def image(self) -> str:
        if not self.vllm_version:
            return f"{DEFAULT_IMAGE}:latest"
        # A CPU or dev build's local version suffix (+cpu) names no published image tag.
        return f"{DEFAULT_IMAGE}:v{self.vllm_version.split('+')[0]}"


def serve_argv(dep: Deployment) -> list[str]:
    return ["vllm", "serve", *dep.args]


def serve_command(dep: Deployment) -> str:
    """One shell line: `KEY=value ... vllm serve MODEL --flag value ...`, quoted by shlex."""
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(dep.env.items())]
    return " ".join([*env, shlex.join(serve_argv(dep))])


def _container_model(model: str) -> tuple[str, list[str]]:
    """A local model directory is mounted read-only into the container; a hub name is used as is."""
    path = Path(model)
    if path.exists():
        target = str(PurePosixPath("/models") / path.resolve().name)
        return target, [f"{path.resolve()}:{target}:ro"]
    return model, []


def compose_service(dep: Deployment, service: str = "vllm") -> dict[str, Any]:
    model, volumes = _container_model(dep.model)
    spec: dict[str, Any] = {
        "image": dep.image,
        "ipc": "host",
        "ports": [f"{CONTAINER_PORT}:{CONTAINER_PORT}"],
        # The image's entrypoint is `vllm serve`: command holds the model and flags.
        "command": [model, *render_flags(dep.flags)],
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}},
        "volumes": ["~/.cache/huggingface:/root/.cache/huggingface", *volumes],
    }
    if dep.env:
        spec["environment"] = dict(sorted(dep.env.items()))
    return {"services": {service: spec}}


def compose_yaml(dep: Deployment, service: str = "vllm") -> str:
    return yaml.safe_dump(compose_service(dep, service), sort_keys=False, default_flow_style=False, width=1000)


def k8s_container(dep: Deployment, name: str = "vllm") -> dict[str, Any]:
    model, _ = _container_model(dep.model)
    container: dict[str, Any] = {
        "name": name,
        "image": dep.image,
        "args": [model, *render_flags(dep.flags)],
        "ports": [{"containerPort": CONTAINER_PORT, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": CONTAINER_PORT}},
    }
    if dep.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(dep.env.items())]
    return container


def k8s_yaml(dep: Deployment, name: str = "vllm") -> str:
    """A `containers:` entry to paste into a Deployment's pod template."""
    return yaml.safe_dump({"containers": [k8s_container(dep, name)]}, sort_keys=False, width=1000)


@dataclass(frozen=True)
class Snippets:
    command: str
    compose: str
    kubernetes: str


def snippets(dep: Deployment) -> Snippets:
    return Snippets(command=serve_command(dep), compose=compose_yaml(dep), kubernetes=k8s_yaml(dep))


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
    paths["command"].write_text("#!/bin/sh\n" + exports + "exec " + shlex.join(serve_argv(dep)) + "\n")
    paths["compose"].write_text(s.compose)
    paths["kubernetes"].write_text(s.kubernetes)
    paths["config"].write_text(Config(flags=dep.flags, env=dep.env).model_dump_json(indent=2) + "\n")
    return paths
