"""STAND-IN for an SGLang server (never a benchmark target).

Started the way servetune starts SGLang:

    python tests/fakes/sglang_standin.py --model-path DIR [SGLang flags] --host H --port P

It prints the boot lines of real SGLang logs (their shapes copied from tests/fixtures/logs/sglang-*,
whose sources tests/fixtures/SGLANG.md names): the `server_args=ServerArgs(...)` line echoing every
flag it got (so the applied check passes for whatever it was given), the KV pool's allocation, the
CUDA graph capture, the scheduler's `max_total_num_tokens=...` line and Uvicorn's. Then it serves
/health, streaming /v1/completions and /v1/chat/completions, /metrics under SGLang's `sglang:`
family names (only with --enable-metrics, as SGLang), and POST /flush_cache, which logs SGLang's
"Cache flushed successfully!" so a test can count the flushes.

`--fault oom` prints SGLang's start-up memory error and exits 1; a flag that SGLang's parser does
not take exits 2 with argparse's words. `--ttft-ms` and `--itl-ms` pace its streams (the stand-in's
speed is a flag, like tests/fakes/standin_engine.py's).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

if __package__ in (None, ""):  # run as a script: make `tests.fakes` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.fake_stream_server import FakeServer  # noqa: E402
from tests.fakes.standin_engine import listening_socket, parse_engine_flags  # noqa: E402

# The flags of SGLang's parser this stand-in takes (a subset: those tests and init's space use),
# and its own pacing and fault flags.
KNOWN = {"model_path", "host", "port", "served_model_name", "chunked_prefill_size", "max_running_requests",
         "mem_fraction_static", "schedule_policy", "cuda_graph_max_bs", "attention_backend", "disable_radix_cache",
         "enable_metrics", "context_length", "load_format", "tp_size", "api_key",
         "ttft_ms", "itl_ms", "fault"}
DEFAULTS = {"chunked_prefill_size": 8192, "max_running_requests": None, "mem_fraction_static": 0.835,
            "schedule_policy": "fcfs", "cuda_graph_max_bs": 4, "attention_backend": "fa3",
            "disable_radix_cache": False, "enable_metrics": False, "context_length": None, "tp_size": 1,
            "load_format": "auto"}
POOL_TOKENS = 20480  # max_total_num_tokens: the docs run's max_total_tokens (logs/sglang-docs-...)
CONTEXT_LEN = 32768
OOM_TEXT = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def log(msg: str, rank: str = "") -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' ' + rank if rank else ''}] {msg}", flush=True)


def server_args(model: str, flags: dict[str, Any]) -> dict[str, Any]:
    """Every resolved argument, SGLang's way: its defaults with the flags laid over."""
    out = {"model_path": model, "tokenizer_path": model, **DEFAULTS, **flags}
    out["served_model_name"] = flags.get("served_model_name", model)
    return out


def boot(model: str, flags: dict[str, Any]) -> dict[str, Any]:
    args = server_args(model, flags)
    if "attention_backend" not in flags:
        log("WARNING server_args.py:1304: Attention backend not explicitly specified. Use fa3 backend by default.")
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")")
    share = float(args["mem_fraction_static"])
    tokens = int(POOL_TOKENS * share / DEFAULTS["mem_fraction_static"])  # more memory, a larger pool
    running = args["max_running_requests"] or 128
    half_gb = tokens * 1024 / 2**30
    log(f"KV Cache is allocated. #tokens: {tokens}, K size: {half_gb:.2f} GB, V size: {half_gb:.2f} GB", "TP0")
    log("Memory pool end. avail mem=68.39 GB", "TP0")
    bs = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b <= int(args["cuda_graph_max_bs"])]
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=68.39 GB", "TP0")
    log(f"Capture cuda graph bs {bs}", "TP0")
    log("Capture cuda graph end. Time elapsed: 0.02 s. mem usage=0.11 GB. avail mem=68.24 GB.", "TP0")
    context = args["context_length"] or CONTEXT_LEN
    log(f"max_total_num_tokens={tokens}, chunked_prefill_size={args['chunked_prefill_size']}, "
        f"max_prefill_tokens=16384, max_running_requests={running}, context_len={context}, "
        "available_gpu_mem=68.24 GB", "TP0")
    return args


class SglangStandin(FakeServer):
    """The fake streaming server with SGLang's /metrics families and /flush_cache."""

    def __init__(self, args: dict[str, Any], ttft_ms: float, itl_ms: float) -> None:
        super().__init__(ttft_ms=ttft_ms, itl_ms=itl_ms, tokens_per_chunk=1, log=False,
                         model=str(args["served_model_name"]))
        self.metrics_on = bool(args["enable_metrics"])
        self.prompt_tokens = 0
        self.generated = 0
        self.running = 0

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.prompt_tokens += len(str(body.get("prompt", body.get("messages", ""))).split())
        self.running += 1
        try:
            return await super().complete(request)
        finally:
            self.running -= 1
            self.generated += int(body.get("max_tokens") or 0)

    async def metrics(self, _: web.Request) -> web.Response:
        if not self.metrics_on:
            return web.Response(status=404, text="Not Found")
        labels = f'{{engine_type="unified",model_name="{self.model}",pp_rank="0",tp_rank="0"}}'
        return web.Response(text=(
            "# HELP sglang:num_running_reqs The number of running requests.\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f"sglang:num_running_reqs{labels} {float(self.running)}\n"
            "# HELP sglang:token_usage The token usage.\n"
            "# TYPE sglang:token_usage gauge\n"
            f"sglang:token_usage{labels} 0.0\n"
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
            "# TYPE sglang:prompt_tokens_total counter\n"
            f"sglang:prompt_tokens_total{labels} {float(self.prompt_tokens)}\n"
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE sglang:generation_tokens_total counter\n"
            f"sglang:generation_tokens_total{labels} {float(self.generated)}\n"))

    async def flush_cache(self, _: web.Request) -> web.Response:
        log("Cache flushed successfully!", "TP0")
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation will not be performed.)\n")

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/flush_cache", self.flush_cache)]


def main(argv: list[str]) -> None:
    flags = parse_engine_flags(argv)
    unknown = sorted(set(flags) - KNOWN)
    if unknown:
        spelled = " ".join("--" + u.replace("_", "-") for u in unknown)
        print("usage: launch_server.py [-h] --model-path MODEL_PATH ...", flush=True)
        print(f"launch_server.py: error: unrecognized arguments: {spelled}", flush=True)
        sys.exit(2)
    model = str(flags.pop("model_path", "standin-model"))
    host, port = str(flags.pop("host", "127.0.0.1")), int(flags.pop("port", 30000))
    # Its own flags stay in the echoed ServerArgs, as every flag of a stand-in does.
    ttft_ms, itl_ms = float(flags.get("ttft_ms", 2.0)), float(flags.get("itl_ms", 1.0))
    if flags.get("fault") == "oom":
        print(OOM_TEXT, flush=True)
        sys.exit(1)
    args = boot(model, {**flags, "host": host, "port": port})
    sock = listening_socket(host, port)
    server = SglangStandin(args, ttft_ms, itl_ms)
    app = web.Application()
    app.add_routes(server.routes())
    log("INFO:     Started server process")
    log(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    web.run_app(app, sock=sock, print=None, access_log=None)


if __name__ == "__main__":
    main(sys.argv[1:])
