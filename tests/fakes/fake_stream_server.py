"""FAKE streaming server for client-accuracy tests and the client ceiling benchmark.

Not vLLM: it speaks vLLM's streaming wire format (completions and chat, continuous usage
stats, trailing usage chunk, [DONE]) and emits tokens at *known* times: the first chunk
`ttft_ms` after the request arrives, then one chunk every `itl_ms`, each carrying
`tokens_per_chunk` tokens (with both delays 0, the whole stream goes out in one write).
The perf_counter_ns of every chunk it writes (taken just before the write) is logged per
prompt (GET /fake/log), which is the truth a client on the same host is compared to
(perf_counter is CLOCK_MONOTONIC, shared by all processes of a Linux host).

Faults, for the client's failure handling: `--stall-after-chunks N` stops every stream after N
chunks and holds the connection open; `--api-key KEY` (or VLLM_API_KEY) answers 401 to any request but
/health without `Authorization: Bearer KEY` (stricter than vLLM, which guards only /v1, so that a test
sees every request carry it); `--models-status CODE` answers /v1/models with that error.
GET /fake/seen counts the 401s answered, the prefix-cache resets and the completion requests.

A crash at a known point (`--die-after-requests N`): the process exits when completion request N + 1
arrives, dropping every connection (a server that dies mid-run).

Self-stamping: the perf_counter_ns at which each completion request reached its handler is kept
(GET /fake/arrivals), the truth a replay's send lateness is checked against. A prefix cache
(`--prefix-cache-block B`): prompts are token words, their full B-token blocks are remembered by
their chain, and /metrics counts `vllm:prefix_cache_queries` (prompt tokens) and
`vllm:prefix_cache_hits` (leading cached blocks, at most the prompt less one token) as vLLM does,
with no eviction and every block cached as its request arrives.

A stepwise slowdown, for `servetune drift`: every request whose prompt has at least
`--drift-long-tokens` tokens adds `--drift-step-itl-ms` to the ITL and `--drift-step-ttft-ms` to the
TTFT of every request that starts after it (the shape of vLLM issue #17140: short-prompt decode
slower after each long request, and stuck there).

A server that wears out, for `servetune soak`: `--ttft-growth-ms-per-s G` adds G ms to the TTFT
for every second the server has been up (a latency drift over hours, compressed), and
`--leak-kib-per-request K` keeps K KiB of memory for every completion request (a leak that grows
the process's RSS).

A server with a known capacity (`--slots N`): a request holds one of N slots from its first token
to its end, waits in a FIFO queue while all are taken, and its first token comes a prefill time
after it gets a slot, drawn from a gamma distribution (shape 2) of mean `ttft_ms` (seeded), so TTFT =
queueing delay + prefill, as `tests/fakes/queue_model.py` simulates without HTTP.

Run: python tests/fakes/fake_stream_server.py --port P [--ttft-ms 20 --itl-ms 10 --processes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import multiprocessing as mp
import os
import random
import time
from typing import Any

from aiohttp import web

MODEL = "fake-model"


def prompt_key(prompt: str) -> str:
    return hashlib.sha1(prompt.encode()).hexdigest()[:16]


class FakeServer:
    def __init__(self, ttft_ms: float, itl_ms: float, tokens_per_chunk: int, log: bool, model: str = MODEL, *,
                 stall_after_chunks: int | None = None, api_key: str | None = None, models_status: int = 200,
                 slots: int | None = None, seed: int = 0, drift_long_tokens: int | None = None,
                 drift_step_itl_ms: float = 0.0, drift_step_ttft_ms: float = 0.0,
                 die_after_requests: int | None = None, prefix_cache_block: int | None = None,
                 stall_prompts_from: int | None = None, ttft_growth_ms_per_s: float = 0.0,
                 leak_kib_per_request: int = 0) -> None:
        self.ttft_ns, self.itl_ns = int(ttft_ms * 1e6), int(itl_ms * 1e6)
        self.k = tokens_per_chunk
        self.keep_log = log
        self.model = model
        self.sent: dict[str, list[int]] = {}
        self.stall_after_chunks = stall_after_chunks
        self.api_key = api_key
        self.models_status = models_status
        self.seen = {"unauthorized": 0, "resets": 0}
        self.slots = asyncio.Semaphore(slots) if slots else None  # FIFO: asyncio wakes waiters in order
        self.rng = random.Random(seed)
        self.drift_long_tokens = drift_long_tokens
        self.drift_step_itl_ns, self.drift_step_ttft_ns = int(drift_step_itl_ms * 1e6), int(drift_step_ttft_ms * 1e6)
        self.long_seen = 0
        self.die_after_requests, self.requests = die_after_requests, 0
        self.arrivals: list[int] = []
        self.cache_block = prefix_cache_block
        self.cached: set[int] = set()
        self.cache_counts = {"queries": 0, "hits": 0}
        self.stall_prompts_from = stall_prompts_from
        self.started_ns = time.perf_counter_ns()
        self.ttft_growth_ns_per_s = int(ttft_growth_ms_per_s * 1e6)
        self.leak_bytes = leak_kib_per_request * 1024
        self.leaked: list[bytearray] = []

    @web.middleware
    async def require_key(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.api_key is not None and request.path not in ("/health", "/fake/seen"):
            if request.headers.get("Authorization") != f"Bearer {self.api_key}":
                self.seen["unauthorized"] += 1
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def models(self, _: web.Request) -> web.Response:
        if self.models_status != 200:
            return web.json_response({"error": {"message": "fake models failure"}}, status=self.models_status)
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        self.seen["resets"] += 1
        return web.Response(text="")

    async def seen_counts(self, _: web.Request) -> web.Response:
        return web.json_response({**self.seen, "requests": self.requests})

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(self, _: web.Request) -> web.Response:
        text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
        if self.cache_block is not None:
            for name, value in self.cache_counts.items():
                text += f"# TYPE vllm:prefix_cache_{name}_total counter\nvllm:prefix_cache_{name}_total {value}.0\n"
        return web.Response(text=text)

    async def arrivals_log(self, _: web.Request) -> web.Response:
        return web.json_response(self.arrivals)

    def count_prefix_hits(self, words: list[str]) -> None:
        """vLLM's prefix-cache counters for one prompt of `words` tokens."""
        assert self.cache_block is not None
        b, n = self.cache_block, len(words)
        chain, hit, hitting = 0, 0, True
        for start in range(0, n - n % b, b):
            chain = hash((chain, *words[start:start + b]))
            if hitting and chain in self.cached and start + b <= n - 1:
                hit += b
            else:
                hitting = False
            self.cached.add(chain)
        self.cache_counts["queries"] += n
        self.cache_counts["hits"] += hit

    async def log(self, _: web.Request) -> web.Response:
        return web.json_response(self.sent)

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        tokens = [int(w[1:]) if w[1:].isdigit() else 0 for w in text.split()]
        return web.json_response({"tokens": tokens, "count": len(tokens)})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": " ".join(f"t{i}" for i in body["tokens"])})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.die_after_requests is not None and self.requests > self.die_after_requests:
            os._exit(1)  # a crash: every connection drops, nothing answers /health any more
        if self.keep_log:
            self.arrivals.append(time.perf_counter_ns())
        if self.leak_bytes:
            self.leaked.append(bytearray(b"x" * self.leak_bytes))  # written: the pages count in RSS
        if self.slots is None:
            now = time.perf_counter_ns()
            worn = self.ttft_growth_ns_per_s * (now - self.started_ns) // 1_000_000_000
            return await self.stream(request, now, self.first_token_ns() + worn)
        arrived = time.perf_counter_ns()
        async with self.slots:
            prefill_ns = int(self.rng.gammavariate(2.0, 0.5) * self.ttft_ns)
            return await self.stream(request, arrived, time.perf_counter_ns() - arrived + prefill_ns)

    def first_token_ns(self) -> int:
        """When this request's first token is due after it arrived (a subclass may vary it)."""
        return self.ttft_ns + self.long_seen * self.drift_step_ttft_ns

    async def stream(self, request: web.Request, arrived: int, ttft_ns: int) -> web.StreamResponse:
        """One response whose first token is due `ttft_ns` after `arrived`."""
        body: dict[str, Any] = json.loads(await request.read())
        chat = "messages" in body
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        n_prompt = len(prompt.split())
        if self.cache_block is not None:
            self.count_prefix_hits(prompt.split())
        if "FAIL" in prompt:  # a request the fake rejects, as a server does a bad one
            return web.json_response({"error": {"message": "fake failure", "code": 500}}, status=500)
        itl_ns = self.itl_ns + self.long_seen * self.drift_step_itl_ns
        if self.drift_long_tokens is not None and n_prompt >= self.drift_long_tokens:
            self.long_seen += 1  # a step for the requests that start after this one
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunks, tail = _render(chat, n, n_prompt, self.k)
        sent: list[int] = []
        if self.stall_prompts_from is not None and n_prompt >= self.stall_prompts_from:
            await asyncio.sleep(3600)  # a prefill that never ends: no first token, connection open
        if self.stall_after_chunks is not None:  # a server that stops sending, connection open
            for chunk in chunks[:self.stall_after_chunks]:
                await resp.write(chunk)
            await asyncio.sleep(3600)
        if ttft_ns == 0 and itl_ns == 0 and "BREAK" not in prompt:
            # Fastest mode: the whole stream in one write (many SSE events per read, as a
            # client sees from a server that generates faster than it reads).
            sent = [time.perf_counter_ns()] * len(chunks)
            await resp.write(b"".join(chunks) + tail)
            chunks = []
        for i, chunk in enumerate(chunks):
            # The chat role chunk goes out with the first token, as vLLM sends it.
            j = max(i - 1, 0) if chat else i
            target = arrived + ttft_ns + j * itl_ns
            wait = target - time.perf_counter_ns()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            sent.append(time.perf_counter_ns())
            await self.write_chunk(resp, i, chunk)
            if "BREAK" in prompt and i == 1:  # a stream cut mid-way, as by a crashing server
                assert request.transport is not None
                request.transport.close()
                return resp
        if chunks:
            await resp.write(tail)
        if self.keep_log:
            self.sent[prompt_key(prompt)] = sent
        await resp.write_eof()
        return resp

    async def write_chunk(self, resp: web.StreamResponse, index: int, chunk: bytes) -> None:
        """One SSE event of a paced stream (a subclass may stall, slow or mangle it)."""
        await resp.write(chunk)

    def routes(self) -> list[web.RouteDef]:
        """The endpoints vLLM's OpenAI server offers that clients of these fakes use, plus /fake/log."""
        return [
            web.get("/v1/models", self.models), web.get("/health", self.health), web.get("/metrics", self.metrics),
            web.get("/fake/log", self.log), web.get("/fake/arrivals", self.arrivals_log),
            web.post("/tokenize", self.tokenize),
            web.post("/detokenize", self.detokenize),
            web.post("/v1/completions", self.complete), web.post("/v1/chat/completions", self.complete),
            web.post("/reset_prefix_cache", self.reset_prefix_cache), web.get("/fake/seen", self.seen_counts),
        ]


@functools.lru_cache(maxsize=1024)
def _render(chat: bool, n: int, n_prompt: int, k: int) -> tuple[list[bytes], bytes]:
    """A response's SSE events, rendered once per shape so that sending costs only writes."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    chunks: list[bytes] = []
    if chat:
        chunks.append(_event(kind, {"index": 0, "delta": {"role": "assistant", "content": ""}}, n_prompt, 0))
    done = 0
    while done < n:
        step = min(k, n - done)
        done += step
        text = " t7" * step
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        choice["finish_reason"] = "length" if done == n else None
        chunks.append(_event(kind, choice, n_prompt, done))
    return chunks, _event(kind, None, n_prompt, n) + b"data: [DONE]\n\n"


def _event(kind: str, choice: dict[str, Any] | None, n_prompt: int, n_done: int) -> bytes:
    obj = {"id": "cmpl-fake", "object": kind, "created": 0, "model": MODEL,
           "choices": [choice] if choice is not None else [],
           "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_done, "completion_tokens": n_done}}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def make_app(ttft_ms: float, itl_ms: float, tokens_per_chunk: int = 1, log: bool = True,
             **faults: Any) -> web.Application:
    """`faults`: FakeServer's keyword options (stall_after_chunks, api_key, models_status)."""
    fake = FakeServer(ttft_ms, itl_ms, tokens_per_chunk, log, **faults)
    app = web.Application(middlewares=[fake.require_key])
    app.add_routes(fake.routes())
    return app


def _serve(args: argparse.Namespace) -> None:
    web.run_app(make_app(args.ttft_ms, args.itl_ms, args.tokens_per_chunk, not args.no_log,
                         stall_after_chunks=args.stall_after_chunks, api_key=args.api_key,
                         models_status=args.models_status, slots=args.slots, seed=args.seed,
                         drift_long_tokens=args.drift_long_tokens, drift_step_itl_ms=args.drift_step_itl_ms,
                         drift_step_ttft_ms=args.drift_step_ttft_ms, die_after_requests=args.die_after_requests,
                         prefix_cache_block=args.prefix_cache_block, stall_prompts_from=args.stall_prompts_from,
                         ttft_growth_ms_per_s=args.ttft_growth_ms_per_s,
                         leak_kib_per_request=args.leak_kib_per_request),
                host="127.0.0.1", port=args.port, reuse_port=args.processes > 1, print=None,
                access_log=None, backlog=4096,
                # aiohttp waits up to 60 s on SIGTERM for open streams to end: a stalled one never
                # does, and the test's teardown would sit out its own 10 s wait before a SIGKILL.
                shutdown_timeout=0.5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--processes", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    p.add_argument("--no-log", action="store_true", help="keep no send log (long benchmark runs)")
    p.add_argument("--stall-after-chunks", type=int, default=None, help="stop every stream after N chunks")
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY") or None,
                   help="answer 401 without this bearer token (all but /health); default: VLLM_API_KEY, as vLLM")
    p.add_argument("--models-status", type=int, default=200, help="HTTP status of /v1/models")
    p.add_argument("--slots", type=int, default=None,
                   help="serve at most N requests at once, queue the rest (TTFT = queueing + gamma prefill)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prefill times (--slots)")
    p.add_argument("--drift-long-tokens", type=int, default=None,
                   help="a prompt this long (tokens) slows every later request by the --drift-step-* amounts")
    p.add_argument("--drift-step-itl-ms", type=float, default=0.0, help="ITL added after each long prompt")
    p.add_argument("--drift-step-ttft-ms", type=float, default=0.0, help="TTFT added after each long prompt")
    p.add_argument("--die-after-requests", type=int, default=None,
                   help="exit at once (a crash) when completion request N + 1 arrives")
    p.add_argument("--prefix-cache-block", type=int, default=None,
                   help="count vLLM's prefix-cache hits in blocks of this many tokens (no eviction)")
    p.add_argument("--stall-prompts-from", type=int, default=None,
                   help="a prompt of at least this many tokens never gets its first token")
    p.add_argument("--ttft-growth-ms-per-s", type=float, default=0.0,
                   help="TTFT added per second of the server's uptime (a drift over a soak)")
    p.add_argument("--leak-kib-per-request", type=int, default=0,
                   help="memory kept for every completion request (a leak)")
    args = p.parse_args()
    if args.processes > 1:
        procs = [mp.Process(target=_serve, args=(args,)) for _ in range(args.processes)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
    else:
        _serve(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
