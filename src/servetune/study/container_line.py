"""A vLLM server as people deploy it: a `docker run ... IMAGE [ARGS]` line, or a service of a
docker compose file, turned into the `ServeLine` a `vllm serve` line gives.

The container's options stay in the study's command (`docker run --gpus all -v ... IMAGE`), so
every trial runs the same image with the same volumes; the server's arguments after the image
become the baseline's flags. Environment variables go to `engine.env`, those that hold a
credential (or are taken from the user's environment: `-e NAME`, `NAME: ${NAME}`) to
`engine.secret_env`, never written with their value. Options that would fight servetune's own
launch are left out and listed: detaching (`-d`: servetune supervises the process), a container
name (two slots would clash), published ports and a TTY (the server runs on the host network,
on the port servetune picks), a restart policy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ServetuneError
from .serve_line import ServeLine, keep_secrets_by_name, parse_server_args, split_words

# `docker run` options that take no value; every other option takes one (unless `--opt=value`).
_SWITCHES = {"--detach", "--rm", "--interactive", "--tty", "--privileged", "--init", "--publish-all",
             "--read-only", "--no-healthcheck", "--sig-proxy", "--disable-content-trust", "--oom-kill-disable"}
# -d -i -t -P, also combined (-it, -dit)
_SHORT_SWITCHES_LONG = {"d": "--detach", "i": "--interactive", "t": "--tty", "P": "--publish-all"}
_SHORT_SWITCHES = set(_SHORT_SWITCHES_LONG)
_LONG_TO_SHORT = {long: f"-{c}" for c, long in _SHORT_SWITCHES_LONG.items()}
# Options left out of the study's command, by their long name.
_LEFT_OUT = {"--detach": "-d (servetune supervises the server)", "--name": "--name (slots would clash)",
             "--publish": "-p (the server listens on the host network)", "--interactive": "-i", "--tty": "-t",
             "--restart": "--restart", "--publish-all": "-P"}
_SHORT_NAMES = {"-d": "--detach", "-e": "--env", "-v": "--volume", "-p": "--publish", "-i": "--interactive",
                "-t": "--tty", "-w": "--workdir", "-u": "--user", "-m": "--memory", "-l": "--label",
                "-h": "--hostname", "-P": "--publish-all"}
_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::?-[^}]*)?\}?$")
_COMPOSE_SUFFIXES = (".yaml", ".yml")


# --- docker run ------------------------------------------------------------------------------

def parse_docker_run(words: list[str], where: str) -> ServeLine:
    """`docker run [OPTIONS] IMAGE [vllm serve] MODEL --flags` (words split already)."""
    if len(words) < 2 or words[1] != "run":
        raise ServetuneError(f"{where}: expected `docker run [OPTIONS] IMAGE ...`, got {' '.join(words[:2])!r}")
    command = words[:2]
    env: dict[str, str] = {}
    secrets: list[str] = []
    dropped: list[str] = []
    i = 2
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        i += 1
        name, eq, value = word.partition("=")
        short = _short_switches(name) if not name.startswith("--") and not eq else None
        if short is not None:  # -d, -it, -dit: each switch kept or left out on its own
            dropped += [_LEFT_OUT[s] for s in short if s in _LEFT_OUT]
            command += [_LONG_TO_SHORT[s] for s in short if s not in _LEFT_OUT]
            continue
        long = _SHORT_NAMES.get(name, name)
        if long in _SWITCHES:
            if long in _LEFT_OUT:
                dropped.append(_LEFT_OUT[long])
            else:
                command.append(word)
            continue
        if not eq:
            if i >= len(words):
                raise ServetuneError(f"{where}: {name} needs a value")
            value = words[i]
            i += 1
        if long == "--env":
            _take_env(value, env, secrets)
        elif long in _LEFT_OUT:
            dropped.append(_LEFT_OUT[long])
        elif long == "--volume":
            command += ["-v", _volume(value, Path.cwd())]
        else:
            command += [name, value] if not eq else [word]
    if i >= len(words):
        raise ServetuneError(f"{where}: no image in the docker run line")
    command.append(words[i])  # the image
    rest = words[i + 1:]
    # The server's own command after the image (`vllm serve`, or `serve` under `--entrypoint vllm`) is
    # kept as given: servetune appends `--model MODEL` and the flags, which `vllm serve` takes too.
    served = 2 if rest[:2] and rest[0].rsplit("/", 1)[-1] == "vllm" and rest[1:2] == ["serve"] else \
        1 if rest[:1] == ["serve"] else 0
    command += rest[:served]
    line = parse_server_args(ServeLine(command=command, model="", env=env, secret_env=secrets), rest[served:], where)
    line.dropped += dropped
    return keep_secrets_by_name(line)


def _short_switches(name: str) -> list[str] | None:
    """`-it` -> ['--interactive', '--tty']; None when `name` is not a run of short switches."""
    letters = name[1:]
    if not letters or not set(letters) <= _SHORT_SWITCHES:
        return None
    return [_SHORT_SWITCHES_LONG[c] for c in letters]


def _take_env(text: str, env: dict[str, str], secrets: list[str]) -> None:
    """`NAME=value` to `env`; `NAME` (the user's own value), `NAME=$NAME` or `NAME=${OTHER}` to `secrets`:
    the value is read from the environment servetune runs in, as the shell would have."""
    name, eq, value = text.partition("=")
    if not eq or _REFERENCE.match(value):
        if name not in secrets:
            secrets.append(name)
    else:
        env[name] = value


def _volume(spec: str, base: Path) -> str:
    """A bind mount's host side as docker run needs it: `~` expanded (the shell or compose would
    have), a relative path resolved against `base` (the compose file's directory); a named volume
    (no slash) as it is."""
    host, sep, rest = spec.partition(":")
    if not sep or not (host.startswith(("~", ".", "/"))):
        return spec
    path = Path(os.path.expanduser(host))
    return f"{path if path.is_absolute() else (base / path).resolve()}:{rest}"


# --- docker compose ----------------------------------------------------------------------------

def names_compose_file(text: str) -> bool:
    """`FILE.yaml` or `FILE.yaml:SERVICE` (one word): a compose file, not a command line."""
    word = text.strip()
    return " " not in word and (word.endswith(_COMPOSE_SUFFIXES)
                                or word.rpartition(":")[0].endswith(_COMPOSE_SUFFIXES))


def parse_compose(text: str, where: str) -> ServeLine:
    """The service of a compose file as `docker run` would start it, then as a docker run line."""
    text = text.strip()
    file, _, service = (text, "", "") if text.endswith(_COMPOSE_SUFFIXES) else text.rpartition(":")
    path = Path(file)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ServetuneError(f"{where}: {file}: not a readable YAML file ({exc})") from None
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict) or not services:
        raise ServetuneError(f"{where}: {file}: no `services:` mapping")
    name = service or _the_vllm_service(services, file, where)
    body = services.get(name)
    if not isinstance(body, dict):
        raise ServetuneError(f"{where}: {file}: no service {name!r} (services: {', '.join(map(str, services))})")
    here = f"{file}: services.{name}"
    image = body.get("image")
    if not isinstance(image, str) or not image:
        raise ServetuneError(f"{where}: {here}.image: a service with an image is needed (a `build:` only "
                             "service has none to run)")
    words = ["docker", "run", "--rm", *_compose_options(body, path.parent, here, where), image,
             *_compose_words(body.get("command"), f"{here}.command", where)]
    line = parse_docker_run(words, f"{where} ({here})")
    line.dropped += [f"{key} (compose)" for key in ("ports", "container_name", "restart") if key in body]
    return line


def _the_vllm_service(services: dict[str, Any], file: str, where: str) -> str:
    if len(services) == 1:
        return str(next(iter(services)))
    vllm = [str(n) for n, b in services.items() if isinstance(b, dict) and "vllm" in str(b.get("image", ""))]
    if len(vllm) == 1:
        return vllm[0]
    raise ServetuneError(f"{where}: {file} has services {', '.join(map(str, services))}: name one as "
                         f"{file}:SERVICE")


def _compose_words(value: Any, here: str, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        return split_words(value, f"{where} ({here})")
    raise ServetuneError(f"{where}: {here}: expected a string or a list")


def _compose_options(body: dict[str, Any], base: Path, here: str, where: str) -> list[str]:
    """The service's keys as docker run options (what compose itself would pass)."""
    out: list[str] = []
    environment = body.get("environment") or {}
    items = (environment.items() if isinstance(environment, dict)
             else (str(e).partition("=")[::2] for e in environment) if isinstance(environment, list) else None)
    if items is None:
        raise ServetuneError(f"{where}: {here}.environment: expected a mapping or a list")
    for key, value in items:
        out += ["-e", str(key) if value in (None, "") else f"{key}={value}"]
    for volume in body.get("volumes") or []:
        out += ["-v", _volume(_compose_volume(volume, here, where), base)]
    env_file = body.get("env_file")
    for file in [env_file] if isinstance(env_file, str) else env_file or []:
        out += ["--env-file", str((base / str(file)).resolve())]
    for key, option in (("ipc", "--ipc"), ("shm_size", "--shm-size"), ("runtime", "--runtime"),
                        ("network_mode", "--network"), ("user", "--user"), ("working_dir", "--workdir")):
        if body.get(key) is not None:
            out.append(f"{option}={body[key]}")
    entrypoint = body.get("entrypoint")
    if entrypoint is not None:
        words = _compose_words(entrypoint, f"{here}.entrypoint", where)
        if len(words) != 1:
            raise ServetuneError(f"{where}: {here}.entrypoint: one program, e.g. `vllm` (its arguments go in "
                                 "`command`)")
        out.append(f"--entrypoint={words[0]}")
    gpus = _compose_gpus(body)
    if gpus:
        out.append(f"--gpus={gpus}")
    return out


def _compose_volume(volume: Any, here: str, where: str) -> str:
    if isinstance(volume, str):
        return volume
    if isinstance(volume, dict) and volume.get("source") and volume.get("target"):
        mode = ":ro" if volume.get("read_only") else ""
        return f"{volume['source']}:{volume['target']}{mode}"
    raise ServetuneError(f"{where}: {here}.volumes: {volume!r} is neither `host:container` nor "
                         "{source, target}")


def _compose_gpus(body: dict[str, Any]) -> str | None:
    """`gpus: all` or `deploy.resources.reservations.devices` with the gpu capability, as `--gpus`."""
    if body.get("gpus") is not None:
        return str(body["gpus"])
    devices = (((body.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    for device in devices:
        if isinstance(device, dict) and "gpu" in (device.get("capabilities") or []):
            if device.get("device_ids"):
                return '"device=' + ",".join(str(d) for d in device["device_ids"]) + '"'
            count = device.get("count", "all")
            return "all" if count in ("all", None) else str(count)
    return None
