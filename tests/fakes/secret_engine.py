"""STAND-IN for `vllm serve` in the secrets tests: takes vLLM's command line (`--model M ...
--host H --port P`), prints a few of vLLM's boot lines and serves the fake streaming API
(fake_stream_server.py). Not vLLM.

It checks how servetune hands it secrets: every `--require-env NAME` must be in its environment
(exit 3 otherwise) and no secret flag (`--api-key`, `--hf-token VALUE`) may be in its argv (exit
4), so a healthy stand-in proves the secrets arrived by environment only. It never prints a
value, unless `--leak` asks it to print them all and exit 1 (a server whose own log leaks them).

Run: python tests/fakes/secret_engine.py [--require-env NAME ...] [--leak] --model M --port P
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_stream_server import make_app  # noqa: E402

SECRET_FLAGS = ("--api-key", "--hf-token")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--require-env", action="append", default=[])
    p.add_argument("--leak", action="store_true")
    p.add_argument("--model", default="fake-model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args, rest = p.parse_known_args()
    print(f"INFO [api_server.py:1] vLLM API server version 0.32.0 (stand-in) model={args.model}", flush=True)
    leaked = [a for a in sys.argv if a.split("=")[0] in SECRET_FLAGS]
    if leaked:
        print(f"ERROR secret flag on the command line: {leaked[0].split('=')[0]}", flush=True)
        sys.exit(4)
    missing = [n for n in args.require_env if not os.environ.get(n)]
    if missing:
        print(f"ERROR required variable not set: {', '.join(missing)}", flush=True)
        sys.exit(3)
    if args.leak:
        for name in args.require_env:
            print(f"ERROR cannot authenticate with {name}={os.environ[name]}", flush=True)
        sys.exit(1)
    print(f"INFO [launcher.py:1] ignoring engine flags {rest}; received {', '.join(args.require_env)}", flush=True)
    print(f"INFO [api_server.py:2] Starting vLLM API server 0 on http://{args.host}:{args.port}", flush=True)
    web.run_app(make_app(0, 0, log=False), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
