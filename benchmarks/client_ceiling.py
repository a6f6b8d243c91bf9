"""How fast can the load generator go? servetune's client vs `vllm bench serve`'s client.

Both drive the FAKE streaming server (tests/fakes/fake_stream_server.py) in the same run, in
alternating rounds, with the same prompts and concurrency. The fake server streams with no
artificial delay, so each client runs as fast as it can: the achieved request rate and
streamed tokens/s are its ceiling on this host. TTFT error = client's first-chunk stamp -
the server's send stamp of that chunk (same host, same monotonic clock).

    .venv/bin/python benchmarks/client_ceiling.py [--requests 2000 --concurrency 256 --output-len 64]

Target: servetune >= 2x vLLM's ceiling with TTFT error p99 <= 1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from servetune.load import bench, client  # noqa: E402
from tests.fakes.fake_stream_server import prompt_key  # noqa: E402
from tests.fakes.launch import fake_server  # noqa: E402

MODEL = "fake-model"
# vLLM's bench client, imported up front so its import does not count as client CPU.
from vllm.benchmarks.lib.endpoint_request_func import (  # noqa: E402
    RequestFuncInput,
    async_request_openai_completions,
)


def _prompts(n: int, tag: str) -> list[str]:
    return [f"{tag}{i}-{time.perf_counter_ns()} t1 t2 t3" for i in range(n)]


def _errors_ms(first_ns: dict[str, int], truth: dict[str, list[int]]) -> np.ndarray:
    return np.asarray([(first_ns[k] - truth[prompt_key(k)][0]) / 1e6 for k in first_ns if prompt_key(k) in truth])


async def _vllm_round(url: str, prompts: list[str], concurrency: int, out_len: int) -> tuple[float, int, dict[str, int]]:
    """vLLM's request function driven the way vllm/benchmarks/serve.py::benchmark drives it."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=3600)) as session:
        sem = asyncio.Semaphore(concurrency)

        async def one(p: str) -> Any:
            async with sem:
                return await async_request_openai_completions(
                    RequestFuncInput(prompt=p, api_url=url + "/v1/completions", prompt_len=4, output_len=out_len,
                                     model=MODEL, ignore_eos=True), session)

        warm = await asyncio.gather(*(one(p) for p in _prompts(concurrency, "warm")))
        assert all(o.success for o in warm)
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(one(p) for p in prompts))
        wall = time.perf_counter() - t0
    ok = [o for o in outs if o.success]
    first = {p: int((o.start_time + o.ttft) * 1e9) for p, o in zip(prompts, outs) if o.success}
    return wall, sum(o.output_tokens for o in ok), first


async def _ours_round(url: str, prompts: list[str], concurrency: int, out_len: int,
                      workers: int) -> tuple[float, int, dict[str, int]]:
    ep = url + "/v1/completions"
    jobs = [client.Job(i, 4, out_len, client.request_body("completions", MODEL, p, out_len, True))
            for i, p in enumerate(prompts)]
    warm = [client.Job(i, 4, out_len, client.request_body("completions", MODEL, p, out_len, True))
            for i, p in enumerate(_prompts(concurrency, "warm"))]
    await client.drive(ep, warm, concurrency=concurrency, start_ns=time.perf_counter_ns())
    parts, start_ns = await bench._measure(ep, jobs, concurrency, workers, None, None)
    records = [r for p in parts for r in p.records]
    wall = (max(r.end_ns or 0 for r in records) - start_ns) / 1e9
    first = {prompts[r.index]: r.first_token_ns for r in records if r.ok and r.first_token_ns}
    return wall, sum(r.output_tokens or 0 for r in records if r.ok), first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="also measure servetune with this many processes")
    ap.add_argument("--server-processes", type=int, default=1)
    args = ap.parse_args()

    rows: dict[str, list[tuple[float, float, np.ndarray, float]]] = {}
    with fake_server(ttft_ms=0, itl_ms=0, processes=args.server_processes) as url:
        variants: list[tuple[str, Any]] = [
            ("vllm bench serve client", lambda p: _vllm_round(url, p, args.concurrency, args.output_len)),
            ("servetune (1 process)", lambda p: _ours_round(url, p, args.concurrency, args.output_len, 1)),
        ]
        if args.workers > 1:
            variants.append((f"servetune ({args.workers} processes)",
                             lambda p: _ours_round(url, p, args.concurrency, args.output_len, args.workers)))
        me = psutil.Process()
        for _ in range(args.rounds):
            for name, fn in variants:
                prompts = _prompts(args.requests, name[:4])
                cpu0 = me.cpu_times()
                wall, tokens, first = client.run(fn(prompts))
                cpu1 = me.cpu_times()
                truth = json.loads(urllib.request.urlopen(url + "/fake/log").read())
                err = _errors_ms(first, truth)
                busy = (cpu1.user - cpu0.user + cpu1.system - cpu0.system) / wall
                rows.setdefault(name, []).append((len(first) / wall, tokens / wall, err, busy))

    table = Table(title=f"client ceiling: {args.requests} requests x {args.output_len} tokens, "
                        f"concurrency {args.concurrency}, fast fake server (best of {args.rounds} rounds)")
    table.add_column("client", no_wrap=True)
    for col in ("req/s", "streamed tok/s", "x vLLM", "TTFT err p50 ms", "TTFT err p99 ms", "main proc CPU"):
        table.add_column(col, justify="right")
    best = {name: max(rs, key=lambda r: r[0]) for name, rs in rows.items()}
    ref = best["vllm bench serve client"][0]
    for name, (rps, tps, err, busy) in best.items():
        table.add_row(name, f"{rps:.0f}", f"{tps:.0f}", f"{rps / ref:.2f}", f"{np.percentile(err, 50):.3f}",
                      f"{np.percentile(err, 99):.3f}", f"{busy:.0%}")
    Console().print(table)


if __name__ == "__main__":
    main()
