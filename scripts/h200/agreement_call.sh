#!/usr/bin/env bash
# bash scripts/h200/agreement_call.sh PRESET  -- on the H200 after device_env.sh.
# Everything below lands in $OUT/agreement-PRESET.tar.gz (folder agreement-PRESET/):
# 1. HBM bandwidth (benchmarks/hbm_bandwidth.py) -> hbm-PRESET.json
# 2. one server with vLLM's defaults (servetune serve), then servetune's client and vLLM's own
#    `vllm bench serve` alternately on it (benchmarks/client_agreement.py) -> agreement-PRESET.*,
#    each round with the server's own TTFT and prefix-cache hits; last, a 16k-token prompt at
#    concurrency 1 with vLLM's prompts fresh each round and then as users run it (seed 0, ready
#    check): the long-prompt TTFT question of docs/results/client-crosscheck.md
# The default-flag boot also warms the compile cache that the study's baseline boot reuses.
set -uo pipefail
PRESET="${1:-qwen3-8b}"
MODEL="/tmp/gpukit/models/$PRESET"
DEST="${OUT:-/tmp/st-out}"; WORK="$(mktemp -d)/agreement-$PRESET"; mkdir -p "$DEST" "$WORK"
# A device call returns at most 8 files and this writes more: all of it goes back as one
# archive, $OUT/agreement-PRESET.tar.gz, also when a step fails.
trap 'tar czf "$DEST/agreement-$PRESET.tar.gz" -C "$(dirname "$WORK")" "agreement-$PRESET"' EXIT
[ -f "$MODEL/tokenizer.json" ] || servetune model make "$PRESET" "$MODEL" >/dev/null
python3 benchmarks/hbm_bandwidth.py --json "$WORK/hbm-$PRESET.json"
servetune serve --model "$MODEL" --port 8000 --log-dir "$WORK/serve-$PRESET" -- --load-format dummy \
  > "$WORK/serve-$PRESET.txt" 2>&1 &
serve_pid=$!
for _ in $(seq 1 300); do
  curl -sf -o /dev/null http://127.0.0.1:8000/health && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "agreement: server did not start"; tail -40 "$WORK/serve-$PRESET.txt"; exit 1; }
  sleep 1
done
echo "agreement: server healthy after ${SECONDS} s"
python3 benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-dir "$MODEL" \
  --scenario contention --scenario prefill-heavy --rounds 1 --json "$WORK/agreement-$PRESET-cp.json" \
  | tee "$WORK/agreement-$PRESET.txt"
python3 benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-dir "$MODEL" \
  --scenario single-decode --num-prompts 6 --rounds 1 --json "$WORK/agreement-$PRESET-sd.json" \
  | tee -a "$WORK/agreement-$PRESET.txt"
for mode in per-round fixed; do
  python3 benchmarks/client_agreement.py --url http://127.0.0.1:8000 --model-dir "$MODEL" \
    --scenario prefill-heavy --input-len 16384 --output-len 64 --concurrency 1 --num-prompts 6 --rounds 3 \
    --vllm-seed "$mode" --json "$WORK/agreement-$PRESET-16k-$mode.json" | tee -a "$WORK/agreement-$PRESET.txt"
done
kill -TERM "$serve_pid"; wait "$serve_pid"
echo "agreement: done after ${SECONDS} s"
