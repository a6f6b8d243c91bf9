"""Trace replay fidelity: send lateness, exact prompt token counts, prefix-cache hit rate.

1. Lateness at 500 req/s: a synthetic Poisson trace (Mooncake JSONL, 3 hash blocks a prompt,
   the first shared by groups of requests) replayed against the FAKE streaming server
   (tests/fakes/fake_stream_server.py), which stamps the arrival of every request with the
   host's monotonic clock; lateness = send - schedule as the client stamped it, and arrival -
   schedule as the server stamped it (arrivals and schedule matched in order).
   Targets: p99 send lateness <= 5 ms, every prompt's token count exact (the server's usage).
2. Token counts and shared blocks at the trace's own lengths: a window of the Mooncake trace
   synthesised with the tiny model's tokenizer (models/tiny); every prompt re-encoded and counted,
   and every pair of requests whose hash ids share a leading run compared token by token there.
3. `--vllm`: the same window on the real vLLM CPU build (tiny model, prefix caching on), its
   /metrics hit rate against the one the trace implies. Boots a server: run under the shared lock.

    .venv/bin/python benchmarks/trace_replay.py [--rate 500 --seconds 10] [--vllm --out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servetune.load.bench import run_scenario  # noqa: E402
from servetune.load.dataset import trace_specs  # noqa: E402
from servetune.load.options import RunOptions  # noqa: E402
from servetune.load.prompts import LocalTokenizer, PromptFactory  # noqa: E402
from servetune.load.records import RequestRecord, RunResult  # noqa: E402
from servetune.load.scenario import Scenario  # noqa: E402
from servetune.load.trace.spec import TraceSpec  # noqa: E402
from servetune.load.trace.synth import TracePrompts  # noqa: E402
from tests.fakes.launch import fake_server  # noqa: E402

MOONCAKE = Path("/work/shared/traces/mooncake-conversation.jsonl")
TINY = ROOT / "models" / "tiny"
KV_BLOCK = 16  # the smallest KV block vLLM caches by
console = Console()


def synthetic_trace(path: Path, rate: float, seconds: float, seed: int = 0) -> int:
    """Poisson arrivals at `rate`; prompts of 3 blocks of 16 tokens, the first shared by groups of 8."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds)))
    with path.open("w") as f:
        for i, t in enumerate(times):
            blocks = [1_000_000 + i // 8, 2 * i, 2 * i + 1]
            f.write(json.dumps({"timestamp": round(t * 1000.0, 3), "input_length": 48, "output_length": 4,
                                "hash_ids": blocks}) + "\n")
    return len(times)


def _ms(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def lateness_round(rate: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, fake_server(ttft_ms=0, itl_ms=0, prefix_cache_block=16) as url:
        trace = Path(tmp) / "synthetic.jsonl"
        n = synthetic_trace(trace, rate, seconds)
        sc = Scenario(name="synthetic", warmups=0,
                      trace=TraceSpec(path=trace, block_size=16, cache_block_size=16))
        result = run_scenario(url, None, sc, RunOptions(tokenizer_dir=TINY, out_dir=Path(tmp), run_id="lateness"))
        records = _records(result)
        with urllib.request.urlopen(url + "/fake/arrivals") as resp:
            arrivals = sorted(json.load(resp))
    scheduled = sorted(r.scheduled_ns for r in records if not r.warmup)
    client_late = [(r.dispatch_ns - r.scheduled_ns) / 1e6 for r in records if not r.warmup]
    server_late = [(a - s) / 1e6 for a, s in zip(arrivals, scheduled)]
    s = result.summary
    return {"rate": rate, "requests": n, "sent": len(client_late), "arrived": len(arrivals),
            "client_ms": _ms(client_late), "server_ms": _ms(server_late),
            "prompts_checked": s.get("prompt_tokens_checked"), "prompts_off": s.get("prompt_tokens_mismatched"),
            "hit_implied": s.get("prefix_hit_rate_implied"), "hit_measured": s.get("prefix_hit_rate_measured"),
            "client_health": {k: result.client_health.get(k) for k in ("cpu_busy", "loop_lag_ms", "achieved_rate")}}


def _records(result: RunResult) -> list[RequestRecord]:
    assert result.records_path is not None, result.error
    return [RequestRecord.model_validate_json(x) for x in Path(result.records_path).read_text().splitlines()]


def mooncake_window(start_s: float, duration_s: float, token_scale: float = 1.0, cache_block: int = 16) -> TraceSpec:
    return TraceSpec(path=MOONCAKE, start_s=start_s, duration_s=duration_s, token_scale=token_scale,
                     cache_block_size=cache_block)


async def _token_check(spec: TraceSpec) -> dict[str, Any]:
    tok = LocalTokenizer(TINY)
    factory = PromptFactory(tok, seed=0, salt=1)
    blocks = TracePrompts(factory, salt=2, block_tokens=spec.block_tokens)
    specs = trace_specs(Scenario(name="w", trace=spec))
    encoded = []
    for s in specs:
        assert s.input_len is not None
        prompt = await blocks.make(s.input_len, s.hash_ids)
        encoded.append(await tok.encode(prompt.text))
    off = sum(len(ids) != s.input_len for ids, s in zip(encoded, specs))
    pairs = shared_ok = 0
    for i in range(1, len(specs)):
        for j in range(i):
            a, b = specs[i].hash_ids or (), specs[j].hash_ids or ()
            k = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            span = min(k * spec.block_tokens, len(encoded[i]), len(encoded[j]))
            if span == 0:
                continue
            pairs += 1
            same = encoded[i][:span] == encoded[j][:span]
            # past the shared run the next KV block differs (its first token alone may collide by chance:
            # the tiny model's vocabulary has 4,096 ids)
            apart = encoded[i][span:span + KV_BLOCK] != encoded[j][span:span + KV_BLOCK]
            apart = apart or span >= min(len(encoded[i]), len(encoded[j]))
            shared_ok += same and apart
    return {"requests": len(specs), "prompt_tokens": sum(len(e) for e in encoded), "prompts_off": off,
            "pairs_sharing": pairs, "pairs_exact": shared_ok}


def vllm_round(spec: TraceSpec, speedup: float, out: Path, block_size: int) -> dict[str, Any]:
    from servetune.engine.config import Config
    from servetune.engine.vllm import DEFAULT_COMMAND, VllmEngine

    engine = VllmEngine(DEFAULT_COMMAND, model=str(TINY), startup_timeout_s=900, log_dir=out,
                        pin_engine_core=True)
    flags = {"load-format": "dummy", "kv-cache-memory-bytes": "2G", "max-model-len": 16384,
             "enforce-eager": True, "enable-prefix-caching": True, "block-size": block_size}
    started = engine.start(Config.of(flags), out / "vllm.server.log")  # type: ignore[arg-type]
    if not started.ok or started.server is None:
        raise SystemExit(f"vLLM did not start: {started.outcome.value}: {started.detail}")
    try:
        sc = Scenario(name="mooncake-window", warmups=2, trace=spec.model_copy(update={"speedup": speedup}))
        result = run_scenario(started.server.url, None, sc, RunOptions(tokenizer_dir=TINY, out_dir=out, run_id="vllm"))
    finally:
        engine.stop(started.server)
    s = result.summary
    return {"outcome": result.outcome.value, "error": result.error, "completed": s.get("completed"),
            "failed": s.get("failed"), "prompts_checked": s.get("prompt_tokens_checked"),
            "prompts_off": s.get("prompt_tokens_mismatched"), "answers_off": s.get("output_tokens_mismatched"),
            "lateness_ms": {k: s.get(f"send_lateness_{k}_ms") for k in ("p50", "p99", "max")},
            "hit_implied": s.get("prefix_hit_rate_implied"), "hit_measured": s.get("prefix_hit_rate_measured"),
            "server": {k: result.server_stats.get(k) for k in ("prefix_cache_queries", "prefix_cache_hits",
                                                                "preemptions", "peak_kv_cache_usage")},
            "p99_ttft_ms": s.get("p99_ttft_ms"), "duration_s": s.get("duration")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--start-s", type=float, default=1200.0, help="the Mooncake window's start")
    ap.add_argument("--duration-s", type=float, default=60.0, help="the Mooncake window's length")
    ap.add_argument("--vllm", action="store_true", help="also replay the window on the real vLLM CPU build")
    ap.add_argument("--token-scale", type=float, default=1 / 16, help="--vllm: lengths and blocks scaled by this")
    ap.add_argument("--speedup", type=float, default=0.25, help="--vllm: replay speed")
    ap.add_argument("--block-size", type=int, default=32, help="--vllm: the server's KV block (--block-size)")
    ap.add_argument("--only-vllm", action="store_true", help="skip parts 1 and 2")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here (a directory)")
    args = ap.parse_args()
    results: dict[str, Any] = {"command": sys.argv[1:]}
    if not args.only_vllm:
        results["lateness"] = lateness_round(args.rate, args.seconds)
        results["tokens"] = asyncio.run(_token_check(mooncake_window(args.start_s, args.duration_s)))
    if args.vllm:
        out = args.out or Path(tempfile.mkdtemp())
        out.mkdir(parents=True, exist_ok=True)
        spec = mooncake_window(args.start_s, args.duration_s, args.token_scale, args.block_size)
        results["vllm"] = vllm_round(spec, args.speedup, out, args.block_size)
    _print(results)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "trace_replay.json").write_text(json.dumps(results, indent=1) + "\n")


def _print(results: dict[str, Any]) -> None:
    if "lateness" in results:
        _print_stand_in(results)
    if "vllm" in results:
        v = results["vllm"]
        console.print(f"vLLM CPU: {v['outcome']}, {v['completed']} completed, {v['failed']} failed; prompts off "
                      f"{v['prompts_off']} of {v['prompts_checked']}; lateness p50/p99/max {v['lateness_ms']} ms; "
                      f"hit rate implied {v['hit_implied']}, measured {v['hit_measured']}; server {v['server']}")


def _print_stand_in(results: dict[str, Any]) -> None:
    lat = results["lateness"]
    table = Table(title=f"send lateness at {lat['rate']:g} req/s ({lat['sent']} requests; target p99 <= 5 ms)")
    for col in ("stamped by", "p50 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="right")
    for who, key in (("client (send)", "client_ms"), ("server (arrival)", "server_ms")):
        table.add_row(who, *(f"{lat[key][k]:.3f}" for k in ("p50", "p99", "max")))
    console.print(table)
    console.print(f"prompts off their token count (server usage): {lat['prompts_off']} of {lat['prompts_checked']}; "
                  f"hit rate implied {lat['hit_implied']:.4f}, measured {lat['hit_measured']:.4f}")
    tok = results["tokens"]
    console.print(f"Mooncake window, tiny tokenizer: {tok['prompts_off']} of {tok['requests']} prompts off their "
                  f"count ({tok['prompt_tokens']:,} tokens); {tok['pairs_exact']} of {tok['pairs_sharing']} pairs "
                  f"sharing blocks share exactly those tokens")


if __name__ == "__main__":
    main()
