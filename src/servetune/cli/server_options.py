"""The options every command that measures a server takes (bench, capacity, drift), declared once:
`url: opt.Url = None` in a command's signature (`from . import server_options as opt`) gives it
`--url` with the same help as the others."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..engine.registry import engine_kinds, profiles
from ..machine.guard import ALLOW_BUSY_ENV
from .server_check import CONNECT_HELP, FIRST_BYTE_HELP

TOKENIZER_HELP = "model dir with tokenizer.json (default: --serve dir, else the server's /tokenize)"
# Where a client's key comes from when no --api-key-env is given: the variables the engines read
# their own key from (vLLM's VLLM_API_KEY), then the OpenAI clients' (what servetune read before
# --api-key-env existed).
DEFAULT_KEY_VARIABLES = (*dict.fromkeys(p.secret_flags["api-key"] for p in profiles() if "api-key" in p.secret_flags),
                         "OPENAI_API_KEY")
API_KEY_ENV_HELP = ("environment variable holding the server's API key (default: "
                    f"{', else '.join(DEFAULT_KEY_VARIABLES)}, when set)")
SERVE_ARG_HELP = "engine flag(s) for --serve, e.g. '--max-num-seqs 64'"
FORCE_HELP = "overwrite an existing result (and the files written beside it)"
ALLOW_BUSY_HELP = ("boot even when another process holds the slot's GPUs (or, without a GPU, takes more than "
                   f"half the host's CPU); the record keeps who was there. Also: {ALLOW_BUSY_ENV}=1")

Url = Annotated[str | None, typer.Option("--url", help="base URL of a running OpenAI-compatible server")]
ServeDir = Annotated[Path | None, typer.Option("--serve", help="launch the engine (--engine) on this model "
                                                                "directory first")]
KINDS = " or ".join(engine_kinds())  # the registered engine kinds (engine/registry.py), as help names them
# The engine --serve launches.
ServeEngine = Annotated[str, typer.Option("--engine", help=f"the engine --serve launches: {KINDS}")]
ServedModel = Annotated[str | None, typer.Option("--model", help="served model name (default: the server's first)")]
Tokenizer = Annotated[Path | None, typer.Option("--tokenizer", help=TOKENIZER_HELP)]
ConnectTimeout = Annotated[float | None, typer.Option("--connect-timeout", help=CONNECT_HELP)]
FirstByteTimeout = Annotated[float | None, typer.Option("--first-byte-timeout", help=FIRST_BYTE_HELP)]
ApiKeyEnv = Annotated[str | None, typer.Option("--api-key-env", help=API_KEY_ENV_HELP)]
Force = Annotated[bool, typer.Option("--force", help=FORCE_HELP)]
AllowBusy = Annotated[bool, typer.Option("--allow-busy-gpu", help=ALLOW_BUSY_HELP, envvar=ALLOW_BUSY_ENV,
                                          show_envvar=False)]
# The engine a command boots (a registered kind: engine/registry.py), for commands without a study file.
EngineKind = Annotated[str, typer.Option("--engine", help=f"the engine to boot: {KINDS} (its own launcher "
                                         "module is the default --command)")]
