"""A `vllm serve MODEL --flags` command line, as people run it today, turned into a study's engine section.

Split with shlex (never a shell): leading `NAME=value` words are environment variables, `vllm
serve` or `python -m vllm.entrypoints.openai.api_server` is the command, the model is the
positional argument (or `--model`), and every `--flag [value]` becomes an `engine.args` entry:
numbers as numbers, `--flag` alone as true, `--no-flag` as false, JSON text as a mapping. The
flags servetune sets itself (host, port, served model name) and secrets (an API key) go where
the study file keeps them. A `docker run` line or a docker compose service is read by
`container_line` into the same shape, the container's options kept in the command.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..engine.config import normalize_flag_name
from ..engine.vllm import SECRET_FLAGS  # a `vllm serve` line: vLLM's secret flags
from ..errors import ServetuneError
from ..secrets import is_secret_name

_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# vLLM's short spellings.
_SHORT = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size",
          "q": "quantization", "O": "compilation-config"}
_DROPPED = {"host", "uvicorn-log-level", "disable-log-requests", "enable-log-requests"}


@dataclass
class ServeLine:
    command: list[str]
    model: str
    args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None
    served_model_name: str | None = None
    secret_env: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # flags left out, for the written file's comment


def parse_serve_line(text: str, where: str = "--serve-cmd") -> ServeLine:
    """A `vllm serve` line, a `docker run ... IMAGE` line (`container_line`), or a docker compose
    file (`FILE.yaml` or `FILE.yaml:SERVICE`, `container_line`) as the study's engine section."""
    from . import container_line  # it builds on this module's flag parsing

    if container_line.names_compose_file(text):
        return container_line.parse_compose(text, where)
    words = split_words(text, where)
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if words and words[0].rsplit("/", 1)[-1] in ("docker", "podman"):
        line = container_line.parse_docker_run(words, where)
        line.env = {**env, **line.env}  # variables before `docker` reach the container as the study's env
        return keep_secrets_by_name(line)
    command, rest = _split_command(words, where)
    return keep_secrets_by_name(parse_server_args(ServeLine(command=command, model="", env=env), rest, where))


def split_words(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ServetuneError(f"{where}: cannot split the command line ({exc})") from None


def keep_secrets_by_name(line: ServeLine) -> ServeLine:
    """A variable that holds a credential (HF_TOKEN, ...) goes to `secret_env`: the study names it,
    its value is read from the user's environment at launch and never written."""
    for name in [n for n in line.env if is_secret_name(n)]:
        del line.env[name]
        if name not in line.secret_env:
            line.secret_env.append(name)
    return line


def parse_server_args(line: ServeLine, rest: list[str], where: str) -> ServeLine:
    """The model and `--flag [value]` words after the server's command, into `line`."""
    positional: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        name, eq, value = word.lstrip("-").partition("=")
        name = _SHORT.get(name, name)
        if not eq:
            if i < len(rest) and not _is_flag(rest[i]):
                value = rest[i]
                i += 1
            else:
                value = ""
        _take(line, normalize_flag_name(name), value, bool(eq) or value != "", where)
    if positional and not line.model:
        line.model = positional.pop(0)
    if positional:
        raise ServetuneError(f"{where}: unexpected argument(s) {' '.join(positional)!r} after the model")
    if not line.model:
        raise ServetuneError(f"{where}: no model in the command line (vllm serve MODEL ...)")
    return line


def _split_command(words: list[str], where: str) -> tuple[list[str], list[str]]:
    if len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "vllm" and words[1] == "serve":
        return words[:2], words[2:]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1].startswith("python") and words[1] == "-m":
        return words[:3], words[3:]
    raise ServetuneError(f"{where}: expected `vllm serve MODEL ...`, `python -m "
                         "vllm.entrypoints.openai.api_server --model MODEL ...`, `docker run ... IMAGE ...` or a "
                         f"compose file (FILE.yaml[:SERVICE]), got {' '.join(words[:3])!r}")


def _is_flag(word: str) -> bool:
    """`--x` or `-x` is a flag; `-1` (a negative number, e.g. `--max-model-len -1`) is a value."""
    return word.startswith("-") and not re.match(r"^-\d", word)


def _take(line: ServeLine, name: str, value: str, has_value: bool, where: str) -> None:
    if name == "model":
        line.model = value
    elif name == "port":
        try:
            line.port = int(value)
        except ValueError:
            raise ServetuneError(f"{where}: --port {value!r} is not a number") from None
    elif name == "served-model-name":
        line.served_model_name = value
    elif name in SECRET_FLAGS:
        # The value stays on the user's side: the study names the variable vLLM reads instead.
        line.secret_env.append(SECRET_FLAGS[name])
    elif name in _DROPPED:
        line.dropped.append(name)
    elif not has_value:
        if name.startswith("no-"):
            line.args[name[3:]] = False
        else:
            line.args[name] = True
    else:
        line.args[name] = _value(value)


def _value(text: str) -> Any:
    """A flag's text as the YAML value a study file would hold."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
