"""`servetune capacity` with its defaults against a local queueing server of known capacity, timed,
and optionally AIPerf's SLA search (its monotonic-sla planner over the request rate) against the
same server, side by side.

The server: tests/fakes/fake_stream_server.py --slots 4 --ttft-ms 20 --itl-ms 5 (4 slots, a
request of 32 + 32 tokens holds one for 20 ms of gamma prefill + 31 x 5 ms: 175 ms; saturates at
22.9 req/s). Its capacity at p99 TTFT <= 150 ms, from the queue model (tests/fakes/queue_model.py),
is printed with the table; over HTTP on a busy host the server is slower than its model, never faster.

Run: python benchmarks/capacity_known_server.py [--before] [--aiperf PATH/TO/aiperf] [--out-dir DIR]
(aiperf in an environment of its own: `python -m venv V && V/bin/pip install aiperf`; installed
into servetune's it would downgrade rich, pillow, prometheus_client, psutil, pyzmq, huggingface_hub)
(--before: also the search as it was, --start 1 --looks-per-run 1: some 26 minutes)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.launch import fake_server  # noqa: E402
from tests.fakes.queue_model import QueueModel  # noqa: E402

MODEL = QueueModel(slots=4, prefill_ms=20.0, itl_ms=5.0, output_len=32)
SLO_MS, Q, RUN = 150.0, 0.99, 500


def servetune(url: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "servetune", "capacity", "--url", url, "--scenario", "chat", "--input-len", "32",
            "--output-len", "32", "--slo", f"ttft:p99={SLO_MS:g}", "--out", str(out), *extra]
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=out.parent)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"servetune capacity exited {proc.returncode}: {proc.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    cap = doc["capacity"]
    probe = doc.get("probe") or {}
    return {"value": cap["value"], "interval": f"[{cap['low']:.3g}, {cap['high'] or float('inf'):.3g}]",
            "levels": doc["levels_measured"], "requests": doc["requests"] + probe.get("requests", 0), "wall_s": wall}


def aiperf(binary: str, url: str, out_dir: Path, tokenizer: Path) -> dict[str, Any]:
    """AIPerf's 1-D SLA search over the request rate: the highest rate whose p99 TTFT is under
    the limit, by its monotonic-sla planner (a binary search over whole req/s: it takes integer
    dimensions only), 500 Poisson requests a point. Its "builtin" tokenizer downloads its
    encoding, so a local tokenizer directory is given."""
    argv = [binary, "profile", "--model", "fake-model", "--url", url, "--endpoint-type", "chat", "--streaming",
            "--isl", "32", "--osl", "32", "--request-count", str(RUN), "--request-rate", "5",
            "--tokenizer", str(tokenizer),
            "--search-space", "phases.profiling.rate:2,24:int", "--search-planner", "monotonic-sla",
            "--search-sla", f"time_to_first_token:p99:le:{SLO_MS:g}", "--search-metric", "request_throughput",
            "--search-direction", "maximize", "--search-max-iterations", "12", "--artifact-dir", str(out_dir)]
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - began
    history = next(out_dir.rglob("search_history.json"), None)
    if proc.returncode != 0 or history is None:
        raise SystemExit(f"aiperf exited {proc.returncode}: {(proc.stderr or proc.stdout)[-3000:]}")
    return {"history": json.loads(history.read_text()), "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", action="store_true", help="also the search as it was (--start 1 --looks-per-run 1)")
    p.add_argument("--aiperf", default=None, help="an aiperf executable (its own environment)")
    p.add_argument("--tokenizer", type=Path, default=ROOT / "models" / "tiny", help="a tokenizer directory for aiperf")
    p.add_argument("--out-dir", type=Path, default=None)
    args = p.parse_args()
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="capacity-known-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    console = Console(width=150)
    truth = MODEL.true_crossing(Q, SLO_MS, RUN, runs=200)
    console.print(f"server: {MODEL.slots} slots, 175 ms a request, saturates at {MODEL.saturation_rate:.1f} req/s; "
                  f"p99 TTFT <= {SLO_MS:g} ms up to {truth:.2f} req/s (queue model)")
    table = Table(title="against the local queueing server")
    for col in ("method", "capacity (req/s)", "interval", "levels", "requests", "wall (min)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    with fake_server(ttft_ms=MODEL.prefill_ms, itl_ms=MODEL.itl_ms, slots=MODEL.slots, log=False) as url:
        runs = [("servetune (defaults)", servetune(url, out_dir / "defaults.json"))]
        if args.before:
            runs.append(("servetune before (--start 1 --looks-per-run 1)",
                         servetune(url, out_dir / "before.json", "--start", "1", "--looks-per-run", "1")))
        for name, r in runs:
            table.add_row(name, f"{r['value']:.3g}", r["interval"], str(r["levels"]), f"{r['requests']:,}",
                          f"{r['wall_s'] / 60:.1f}")
        if args.aiperf:
            found = aiperf(args.aiperf, url, out_dir / "aiperf", args.tokenizer)
            (out_dir / "aiperf-history.json").write_text(json.dumps(found["history"], indent=1))
            table.add_row("AIPerf SLA search (monotonic-sla, request rate)", "see aiperf-history.json", "none",
                          "", "", f"{found['wall_s'] / 60:.1f}")
    console.print(table)
    console.print(f"outputs under {out_dir}")


if __name__ == "__main__":
    main()
