"""benchmarks/prefix_cache_gap.py: a stored trace Run recounted from its files (its block-pool
replay is load/trace/pool.py's, tested in test_trace_pool.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.prefix_cache_gap import kv_tokens_of, recount
from servetune.load.records import RequestRecord

BLOCK, KV = 32, 16   # trace block, KV block (tokens)


def test_a_stored_run_is_recounted_from_its_files_and_its_boot_log(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [(0, 64, [1, 2]), (1000, 65, [1, 2, 3]), (2000, 32, None), (3000, 65, [1, 2, 3])]
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1,
                                         **({"hash_ids": h} if h else {})}) + "\n" for t, n, h in rows))
    (tmp_path / "runs").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "trial001-baseline.log").write_text(
        "(EngineCore pid=1) INFO 12-05 11:05:48 [kv_cache_utils.py:2177] GPU KV cache size: 80 tokens\n")
    run = tmp_path / "runs" / "trial001-trace-L01.json"
    trace_spec = {"path": str(trace), "block_size": BLOCK, "cache_block_size": KV}
    run.write_text(json.dumps({"scenario": {"trace": trace_spec},
                               "server_stats": {"prefix_cache_hits": 112.0, "prefix_cache_queries": 226.0}}))
    # Request 1 is sent before request 0's first token; request 2 then evicts request 0's last block.
    times = [(10, 30, 40), (20, 50, 60), (70, 80, 90), (100, 110, 120)]
    run.with_suffix(".requests.jsonl").write_text("".join(
        RequestRecord(index=i, input_len=rows[i][1], output_len=1, scheduled_ns=s, dispatch_ns=s,
                      first_token_ns=f, end_ns=e).model_dump_json() + "\n" for i, (s, f, e) in enumerate(times)))
    assert kv_tokens_of(tmp_path, run.stem) == 80
    got = recount(tmp_path, run, None, None)
    assert (got.queries, got.implied, got.finished, got.pool, got.kv_tokens, got.measured) == \
        (226, 128, 64, 112, 80, 112.0)
