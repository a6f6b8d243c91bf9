"""How fast can the load generator go? servetune's client vs `vllm bench serve`'s client.

Both drive the FAKE streaming server (tests/fakes/fake_stream_server.py, fastest mode: no
artificial delay, each response in one write) in the same run, with the same open-loop
Poisson schedules, at increasing offered rates. A client *sustains* a rate when it sends at
>= 95 % of it, every request completes, and its TTFT error p99 is <= 1 ms (error = client's
first-chunk stamp - the server's send stamp; same host, same monotonic clock). Its ceiling
is the highest rate it sustains; streamed tokens/s are reported at that rate.

    .venv/bin/python benchmarks/client_ceiling.py [--rates 250,375,500,750,1000 --output-len 64]

Target: servetune >= 2x vLLM's ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# vLLM's bench client, imported up front (its import is slow and not part of any round).
from vllm.benchmarks.lib.endpoint_request_func import (  # noqa: E402
    RequestFuncInput,
    async_request_openai_completions,
)

from servetune.load import arrivals, bench, client  # noqa: E402
from tests.fakes.fake_stream_server import prompt_key  # noqa: E402
from tests.fakes.launch import fake_server  # noqa: E402

MODEL = "fake-model"
MAX_ERR_MS = 1.0
MIN_SEND_RATIO = 0.95


@dataclass
class Round:
    sent: int
    completed: int
    tokens: int
    start_ns: int
    last_dispatch_ns: int
    end_ns: int
    first_ns: dict[str, int]      # prompt -> client's first-chunk stamp


def _prompts(n: int, tag: str) -> list[str]:
    return [f"{tag}{i}-{time.perf_counter_ns()} t1 t2 t3" for i in range(n)]


async def _vllm_round(url: str, prompts: list[str], offsets: np.ndarray, out_len: int) -> Round:
    """vLLM's request function driven as vllm/benchmarks/serve.py::benchmark drives it in an
    open loop: sleep until each arrival, create a task, gather."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=3600)) as session:

        def one(p: str) -> Awaitable[object]:
            return async_request_openai_completions(RequestFuncInput(
                prompt=p, api_url=url + "/v1/completions", prompt_len=4, output_len=out_len, model=MODEL,
                ignore_eos=True), session)

        await asyncio.gather(*(one(p) for p in _prompts(64, "warm")))
        start = time.perf_counter()
        tasks = []
        for p, off in zip(prompts, offsets):
            delay = start + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(p)))
        outs = await asyncio.gather(*tasks)
    ok = [(p, o) for p, o in zip(prompts, outs) if o.success]  # type: ignore[attr-defined]
    return Round(
        sent=len(outs), completed=len(ok), tokens=sum(o.output_tokens for _, o in ok),  # type: ignore[attr-defined]
        start_ns=int(start * 1e9), last_dispatch_ns=int(max(o.start_time for o in outs) * 1e9),  # type: ignore[attr-defined]
        end_ns=int(max(o.start_time + o.latency for _, o in ok) * 1e9) if ok else 0,  # type: ignore[attr-defined]
        first_ns={p: int((o.start_time + o.ttft) * 1e9) for p, o in ok})  # type: ignore[attr-defined]


async def _ours_round(url: str, prompts: list[str], offsets: np.ndarray, out_len: int, workers: int) -> Round:
    ep = url + "/v1/completions"
    jobs = [client.Job(i, 4, out_len, client.request_body("completions", MODEL, p, out_len, True),
                       offset_ns=int(off * 1e9)) for i, (p, off) in enumerate(zip(prompts, offsets))]
    parts, start_ns = await bench._measure(ep, jobs, None, workers, None, None)
    recs = [r for part in parts for r in part.records]
    ok = [r for r in recs if r.ok and r.first_token_ns]
    return Round(sent=len(recs), completed=len(ok), tokens=sum(r.output_tokens or 0 for r in ok), start_ns=start_ns,
                 last_dispatch_ns=max(r.dispatch_ns for r in recs), end_ns=max((r.end_ns or 0) for r in ok),
                 first_ns={prompts[r.index]: r.first_token_ns or 0 for r in ok})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="250,375,500,750,1000,1500,2000,3000", help="offered req/s, ascending")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each round's schedule")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2, help="also measure servetune with this many processes (0: no)")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]

    Runner = Callable[[list[str], np.ndarray], Awaitable[Round]]
    console = Console()
    results: dict[str, list[tuple[float, float, float, float, bool]]] = {}
    with fake_server(ttft_ms=0, itl_ms=0) as url:
        variants: list[tuple[str, Runner]] = [
            ("vllm bench serve client", lambda p, o: _vllm_round(url, p, o, args.output_len)),
            ("servetune, 1 process", lambda p, o: _ours_round(url, p, o, args.output_len, 1)),
        ]
        if args.workers > 1:
            variants.append((f"servetune, {args.workers} processes",
                             lambda p, o: _ours_round(url, p, o, args.output_len, args.workers)))
        for rate in rates:
            n = max(int(rate * args.seconds), 50)
            offsets = arrivals.open_loop_offsets(n, rate, 1.0, np.random.default_rng(0))
            for name, run in variants:
                prompts = _prompts(n, name[:6].replace(" ", ""))
                r = client.run(run(prompts, offsets))
                truth = json.loads(urllib.request.urlopen(url + "/fake/log").read())
                err = np.asarray([(t - truth[prompt_key(p)][0]) / 1e6 for p, t in r.first_ns.items()])
                send_rate = r.sent / max((r.last_dispatch_ns - r.start_ns) / 1e9, 1e-9)
                p99 = float(np.percentile(err, 99)) if len(err) else float("inf")
                ok = r.completed == n and send_rate >= MIN_SEND_RATIO * rate and p99 <= MAX_ERR_MS
                tok_s = r.tokens / max((r.end_ns - r.start_ns) / 1e9, 1e-9)
                results.setdefault(name, []).append((rate, send_rate, tok_s, p99, ok))
                console.print(f"{name:28s} offered {rate:7.0f}/s: sent {send_rate:7.0f}/s, {tok_s:9.0f} tok/s, "
                              f"TTFT err p99 {p99:8.3f} ms -> {'sustained' if ok else 'not sustained'}")

    table = Table(title=f"client ceiling on this host: fast fake server, {args.output_len}-token streams, "
                        f"Poisson arrivals, sustained = sends >= {MIN_SEND_RATIO:.0%} of the rate, all complete, "
                        f"TTFT error p99 <= {MAX_ERR_MS} ms")
    table.add_column("client", no_wrap=True)
    for col in ("ceiling req/s", "streamed tok/s", "TTFT err p99 ms", "x vLLM"):
        table.add_column(col, justify="right")
    ceilings: dict[str, tuple[float, float, float]] = {}
    for name, rows in results.items():
        good = [row for row in rows if row[4]]
        best = max(good, key=lambda row: row[0]) if good else (0.0, 0.0, 0.0, float("nan"), False)
        ceilings[name] = (best[0], best[2], best[3])
    ref = ceilings["vllm bench serve client"][0] or float("nan")
    for name, (rate, tok_s, p99) in ceilings.items():
        table.add_row(name, f"{rate:.0f}", f"{tok_s:.0f}", f"{p99:.3f}", f"{rate / ref:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
