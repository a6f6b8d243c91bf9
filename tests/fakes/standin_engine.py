"""STAND-IN for a vLLM OpenAI server, with faults switched on per trial (never a benchmark target).

Started the way servetune starts vLLM:

    python tests/fakes/standin_engine.py --model DIR --host H --port P [vLLM flags] [--fault NAME ...]

It prints vLLM 0.32's boot lines (CPU build; format copied from tests/fixtures/logs/), echoing every
flag it got in the "non-default args" line and the engine config line, so `engine/bootfacts.py`
parses it and the applied check passes for whatever it was given. Then it serves what servetune uses
of vLLM's API: /health, /v1/models, streaming /v1/completions and /v1/chat/completions (the
streaming of tests/fakes/fake_stream_server.py), /metrics, /reset_prefix_cache, /tokenize and
/detokenize. With `--api-key K` (or VLLM_API_KEY) the /v1 routes answer 401 without
`Authorization: Bearer K`, as vLLM's do. It boots in a fraction of a second.

Like vLLM, it keeps a compile-cache entry per config under `$VLLM_CACHE_ROOT/torch_compile_cache/`
(keyed by a hash of its flags) and logs which one it used and whether it loaded it; `--fault
poison-cache` (with `--fault-state FILE`, where it counts each config's boots) has a config's boot
K+1 (`--fault-after K`) leave a marker in that entry: every boot that finds the marker boots slowly
and serves 20x slower, as a poisoned compile cache does, until the entry is wiped.

A study sweeps faults as an ordinary flag (`space: {fault: [stall, none]}`); `--fault-after K`,
`--fault-delay-ms MS` and `--fault-endpoint PATH` tune them. See FAULTS for the names; `--fault a,b` switches on two.

Its speed is a flag too: `--ttft-ms` (default 2) and `--itl-ms` (default 1) pace every stream, and
`--slow-ttft-every K --slow-ttft-ms MS` give every K-th completion request (warmups count) a first
token after MS instead: exactly one request in any K in a row, a tail of 1/K at a known latency
(1/100 sits a p99 at that boundary).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

if __package__ in (None, ""):  # run as a script: make `tests.fakes` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.fake_stream_server import FakeServer  # noqa: E402

FAULTS = {
    "none": "no fault (an explicit value, so a space can hold a faultless candidate)",
    "crash-at-boot": "exit 1 with an engine-core traceback before serving",
    "crash-after": "exit 1 when request K+1 arrives (--fault-after K)",
    "hang-before-health": "print boot lines, then never listen",
    "stall": "from request K+1 on, send two chunks of each stream, then nothing (connection kept open)",
    "oom": "print vLLM's CUDA out-of-memory error at boot and exit 1",
    "ignore-sigterm": "serve normally with SIGTERM ignored",
    "child-same-group": "spawn a child process in the server's process group",
    "child-own-session": "spawn a child process in a session of its own",
    "double-fork": "double-fork a daemon that keeps the listening socket (and so the port) open",
    "http-500": "answer 500 on the --fault-endpoint paths (default: every path but /health)",
    "http-401": "answer 401 on the --fault-endpoint paths (default: every path but /health)",
    "slow-chunks": "wait --fault-delay-ms before every chunk of a stream",
    "partial-json": "write every SSE event in two pieces, cut inside its JSON",
    "garbled-json": "send a chunk whose JSON is broken in every stream",
    "poison-cache": "the config's boot K+1 (--fault-after K; --fault-state FILE counts) marks its compile-cache "
                    "entry; a boot that finds the mark boots slowly and serves 20x slower",
}
POISON_MARK = "poisoned"
POISON_SLOWDOWN = 20.0
# Flags that are not part of a config's compile key (as vLLM's hash leaves out host and port)
_NOT_COMPILED = frozenset({"host", "port", "fault", "fault_after", "fault_state", "fault_delay_ms", "fault_endpoint"})
VERSION = "0.32.0"
BYTES_PER_KV_TOKEN = 1024  # the stand-in's KV cache size follows --kv-cache-memory-bytes
DEFAULT_MAX_MODEL_LEN = 2048
MODEL_MAX_LEN = 16384  # the stand-in model's own longest context (max_position_embeddings)
NULL_BLOCK_TOKENS = 128
DEFAULT_BATCHED_TOKENS = 2048
OOM_TEXT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 139.80 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
            "has 138.77 GiB memory in use.")
_SLEEP_FOREVER = [sys.executable, "-c", "import time; time.sleep(3600)"]


def parse_engine_flags(argv: list[str]) -> dict[str, Any]:
    """vLLM flags as its CLI reads them: `--x V` (int, float, JSON or text), `--x` True, `--no-x` False."""
    flags: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, inline = word[2:].partition("=")
        if eq:
            flags[name.replace("-", "_")] = _literal(inline)
        elif i < len(argv) and not argv[i].startswith("--"):
            flags[name.replace("-", "_")] = _literal(argv[i])
            i += 1
        elif name.startswith("no-"):
            flags[name[3:].replace("-", "_")] = False
        else:
            flags[name.replace("-", "_")] = True
    return flags


def _literal(text: str) -> Any:
    for parse in (int, float, json.loads):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


class BootLog:
    """vLLM 0.32's log line format: `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:L] message`."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def line(self, proc: str, level: str, where: str, msg: str) -> None:
        print(f"({proc} pid={self.pid}) {level} {time.strftime('%m-%d %H:%M:%S')} [{where}] {msg}", flush=True)

    def banner(self, model: str, flags: dict[str, Any]) -> None:
        self.line("APIServer", "INFO", "api_utils.py:347", f"       version {VERSION}")
        self.line("APIServer", "INFO", "api_utils.py:347", f"       model   {model}")
        self.line("APIServer", "INFO", "api_utils.py:286", f"non-default args: {flags!r}")

    def engine(self, model: str, flags: dict[str, Any]) -> None:
        max_len = int(flags.get("max_model_len", DEFAULT_MAX_MODEL_LEN))
        batched = int(flags.get("max_num_batched_tokens", DEFAULT_BATCHED_TOKENS))
        kv_bytes = int(flags.get("kv_cache_memory_bytes", 1 << 30))
        tokens = kv_bytes // BYTES_PER_KV_TOKEN
        fits = tokens - NULL_BLOCK_TOKENS  # vLLM's block pool holds one null block back
        if max_len == -1:  # vLLM's automatic max-model-len: the longest that fits, up to the model's
            max_len = min(fits, MODEL_MAX_LEN)
            self.line("EngineCore", "INFO", "kv_cache_utils.py:2480",
                      f"Auto-fit max_model_len: reduced from {MODEL_MAX_LEN} to {max_len} to fit in available "
                      f"KV cache memory ({kv_bytes / 2**30:.2f} GiB CPU)")
        elif max_len > fits:
            self.line("EngineCore", "ERROR", "core.py:1510",
                      f"ValueError: To serve at least one request with the model's max seq len ({max_len}), "
                      f"({max_len * BYTES_PER_KV_TOKEN / 2**30:.2f} GiB KV cache is needed, which is larger than "
                      f"the available KV cache memory ({kv_bytes / 2**30:.2f} GiB). Based on the available memory, "
                      f"the estimated maximum model length is {fits}. Try increasing `gpu_memory_utilization`")
            sys.exit(1)
        config = {
            "model": repr(model), "tokenizer": repr(model), "dtype": "torch.bfloat16", "max_seq_len": max_len,
            "load_format": flags.get("load_format", "auto"), "device_config": "cpu", "seed": flags.get("seed", 0),
            "served_model_name": flags.get("served_model_name", model),
            "enable_prefix_caching": flags.get("enable_prefix_caching", True),
            "enable_chunked_prefill": flags.get("enable_chunked_prefill", True),
        }
        text = ", ".join(f"{k}={v}" for k, v in config.items())
        self.line("APIServer", "INFO", "model.py:2152", f"Using max model len {max_len}")
        self.line("APIServer", "INFO", "scheduler.py:307",
                  f"Chunked prefill is enabled with max_num_batched_tokens={batched}.")
        self.line("EngineCore", "INFO", "core.py:133",
                  f"Initializing a V1 LLM engine (v{VERSION}) with config: {text}")
        self.line("Worker", "INFO", "base_loader.py:82", "Initializing model took 0.010000 seconds")
        self.line("Worker", "INFO", "cpu_worker.py:260",
                  f"Explicitly set ({kv_bytes / 2**30:.1f}/14.09) GiB for KV cache on node 0.")
        self.line("EngineCore", "INFO", "kv_cache_utils.py:2327",
                  f"CPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per request:"
                  f" {tokens / max_len:.2f}x")
        self.line("EngineCore", "INFO", "core.py:402", "init engine (profile, create kv cache, warmup model) took 0.01 s")


def compile_cache(log: BootLog, flags: dict[str, Any], args: argparse.Namespace) -> bool:
    """vLLM's compile-cache lines for this config's entry under $VLLM_CACHE_ROOT (none without it);
    True when the entry holds the poison mark (see FAULTS)."""
    root = os.environ.get("VLLM_CACHE_ROOT")
    if not root:
        return False
    key = hashlib.sha256(json.dumps({k: v for k, v in flags.items() if k not in _NOT_COMPILED},
                                    sort_keys=True, default=str).encode()).hexdigest()[:10]
    entry = Path(root) / "torch_compile_cache" / key / "rank_0_0" / "backbone"
    warm = (entry / "vllm_compile_cache.py").is_file()
    log.line("EngineCore", "INFO", "backends.py:1105", f"Using cache directory: {entry} for vLLM's torch.compile")
    entry.mkdir(parents=True, exist_ok=True)
    if "poison-cache" in args.fault and args.fault_state:
        state = Path(args.fault_state)
        counts = json.loads(state.read_text()) if state.is_file() else {}
        counts[key] = counts.get(key, 0) + 1
        state.write_text(json.dumps(counts))
        if counts[key] == args.fault_after + 1:
            (entry / POISON_MARK).write_text("written by a boot with a polluted environment\n")
    poisoned = (entry / POISON_MARK).is_file()
    if warm:
        log.line("EngineCore", "INFO", "backends.py:296",
                 "[backbone] Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 0.01 s")
    else:
        (entry / "vllm_compile_cache.py").write_text("{}\n")
    compile_s = 0.02 if warm else 0.2
    if poisoned:
        time.sleep(1.0)   # a slow boot
        compile_s += 1.0
    log.line("EngineCore", "INFO", "monitor.py:53", f"torch.compile took {compile_s:.2f} s in total")
    return poisoned


class StandinServer(FakeServer):
    """The fake streaming server with counters, vLLM's extra endpoints and stream faults."""

    def __init__(self, args: argparse.Namespace, model: str, kv_tokens: int, slowdown: float = 1.0) -> None:
        super().__init__(ttft_ms=args.ttft_ms * slowdown, itl_ms=args.itl_ms * slowdown, tokens_per_chunk=1, log=False,
                         model=model)
        self.args = args
        self.completions = 0   # its own count: FakeServer.requests counts the same requests for /fake/seen
        self.tokens_out = 0
        # A KV pool of kv_tokens: each running request holds prompt + max_tokens; a request that
        # does not fit is counted as a preemption (it runs anyway: timings are not the point here).
        self.kv_tokens = kv_tokens
        self.kv_held = 0
        self.kv_peak = 0.0
        self.preemptions = 0
        self.running = 0
        self.running_peak = 0

    def first_token_ns(self) -> int:
        every = self.args.slow_ttft_every
        if every and self.completions % every == 0:
            return int(self.args.slow_ttft_ms * 1e6)
        return super().first_token_ns()

    def faulty(self) -> bool:
        """Request-count faults apply from request K+1 on (warmups count)."""
        return self.completions > self.args.fault_after

    async def complete(self, request: web.Request) -> web.StreamResponse:
        self.completions += 1
        if "crash-after" in self.args.fault and self.faulty():
            BootLog().line("EngineCore", "ERROR", "core.py:1021", "EngineCore encountered a fatal error.")
            print("RuntimeError: stand-in engine core died (fault crash-after)", flush=True)
            os._exit(1)
        body = json.loads(await request.read())
        held = len(str(body.get("prompt", body.get("messages", ""))).split()) + int(body.get("max_tokens") or 0)
        if self.kv_held + held > self.kv_tokens:
            self.preemptions += 1
        self.kv_held += held
        self.running += 1
        self.kv_peak = max(self.kv_peak, min(1.0, self.kv_held / self.kv_tokens))
        self.running_peak = max(self.running_peak, self.running)
        try:
            resp = await super().complete(request)
        finally:
            self.kv_held -= held
            self.running -= 1
        self.tokens_out += int(body.get("max_tokens") or 0)
        return resp

    async def write_chunk(self, resp: web.StreamResponse, index: int, chunk: bytes) -> None:
        faults = self.args.fault
        if "stall" in faults and self.faulty() and index >= 2:
            await asyncio.sleep(10 * 24 * 3600)  # the engine stops sending; the connection stays open
        if "slow-chunks" in faults:
            await asyncio.sleep(self.args.fault_delay_ms / 1e3)
        if "garbled-json" in faults and index == 1:
            chunk = b'data: {"id": "cmpl-standin", "choices": [{"text": tru\n\n'
        if "partial-json" in faults:
            cut = len(chunk) // 2
            await resp.write(chunk[:cut])
            await asyncio.sleep(0.002)  # two socket reads for the client, the cut inside the JSON
            chunk = chunk[cut:]
        await resp.write(chunk)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=(
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running {self._take_running_peak()}\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{finished_reason="length"}} {float(self.completions)}\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total {float(self.tokens_out)}\n"
            "# TYPE vllm:num_preemptions_total counter\n"
            f"vllm:num_preemptions_total {float(self.preemptions)}\n"
            # the peak since the last scrape: a gauge sampled every 0.5 s would miss short requests
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc {self._take_kv_peak()}\n"))

    def _take_running_peak(self) -> float:
        peak, self.running_peak = self.running_peak, self.running
        return float(peak)

    def _take_kv_peak(self) -> float:
        peak, self.kv_peak = self.kv_peak, min(1.0, self.kv_held / self.kv_tokens)
        return peak



def error_middleware(args: argparse.Namespace, api_key: str | None) -> Any:
    """401 for the /v1 routes without the key (as vLLM's --api-key), and the http-500/401 faults."""
    status = 500 if "http-500" in args.fault else 401 if "http-401" in args.fault else None
    endpoints = set(args.fault_endpoint)

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if api_key and path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        if status is not None and (path in endpoints if endpoints else path != "/health"):
            return web.json_response({"error": {"message": f"stand-in fault on {path}", "code": status}},
                                     status=status)
        return await handler(request)

    return middleware


def listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(f"OSError: [Errno {exc.errno}] {exc.strerror}", flush=True)  # vLLM's words, classified port_in_use
        sys.exit(1)
    sock.listen(1024)
    return sock


def double_fork_holding(sock: socket.socket) -> None:
    """A daemon (own session, parent gone, so not in the group and no descendant) that keeps `sock`."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            time.sleep(3600)
            os._exit(0)
        os._exit(0)
    os.wait()


def _ignore_sigterm(signum: int, frame: object) -> None:
    print("SIGTERM ignored (fault ignore-sigterm)", flush=True)  # tests wait for this line


def spawn_children(faults: list[str]) -> None:
    if "child-same-group" in faults:
        subprocess.Popen(_SLEEP_FOREVER)
    if "child-own-session" in faults:
        subprocess.Popen(_SLEEP_FOREVER, start_new_session=True)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_positional", nargs="?", help="the model, as `vllm serve MODEL` takes it")
    p.add_argument("--model", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--fault", action="append", default=[], help="a name of FAULTS, or several joined by commas")
    p.add_argument("--fault-after", type=int, default=0, help="requests served before a request fault starts")
    p.add_argument("--fault-delay-ms", type=float, default=200.0, help="slow-chunks: delay before each chunk")
    p.add_argument("--fault-endpoint", action="append", default=[], help="http-500/401: the paths (repeatable)")
    p.add_argument("--ttft-ms", type=float, default=2.0, help="first token this long after a request arrives")
    p.add_argument("--itl-ms", type=float, default=1.0, help="one token every this long after the first")
    p.add_argument("--slow-ttft-every", type=int, default=0, help="every K-th completion request is slow (0: none)")
    p.add_argument("--slow-ttft-ms", type=float, default=0.0, help="the slow requests' first token after this long")
    p.add_argument("--fault-state", default=None, help="poison-cache: the file where each config's boots are counted")
    args, rest = p.parse_known_args(argv)
    args.fault = [name for text in args.fault for name in text.split(",") if name]
    unknown = sorted(set(args.fault) - set(FAULTS))
    if unknown:
        p.error(f"unknown fault(s) {unknown}; known: {', '.join(FAULTS)}")
    return args, rest


def main(argv: list[str]) -> None:
    args, _ = parse_args(argv)
    model = args.model or args.model_positional or "standin-model"
    flags = parse_engine_flags(argv)
    if args.model_positional:
        flags.setdefault("model", model)
    log = BootLog()
    log.banner(model, flags)
    if "crash-at-boot" in args.fault:
        log.line("EngineCore", "ERROR", "core.py:1021", "EngineCore failed to start.")
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        sys.exit(1)
    if "oom" in args.fault:
        log.line("EngineCore", "ERROR", "core.py:1021", "EngineCore failed to start.")
        print(OOM_TEXT, flush=True)
        sys.exit(1)
    log.engine(model, flags)
    poisoned = compile_cache(log, flags, args)
    if "hang-before-health" in args.fault:
        time.sleep(10 * 24 * 3600)
    if "ignore-sigterm" in args.fault:
        signal.signal(signal.SIGTERM, _ignore_sigterm)
    sock = listening_socket(args.host, args.port)
    if "double-fork" in args.fault:
        double_fork_holding(sock)
    spawn_children(args.fault)
    kv_tokens = int(flags.get("kv_cache_memory_bytes", 1 << 30)) // BYTES_PER_KV_TOKEN
    server = StandinServer(args, args.served_model_name or model, kv_tokens,
                           slowdown=POISON_SLOWDOWN if poisoned else 1.0)
    app = web.Application(middlewares=[error_middleware(args, args.api_key or os.environ.get("VLLM_API_KEY"))])
    app.add_routes(server.routes())
    log.line("APIServer", "INFO", "entry.py:140", f"Starting vLLM server on http://{args.host}:{args.port}")
    # aiohttp's own SIGTERM handler would undo SIG_IGN
    web.run_app(app, sock=sock, print=None, access_log=None, handle_signals="ignore-sigterm" not in args.fault)


if __name__ == "__main__":
    main(sys.argv[1:])
