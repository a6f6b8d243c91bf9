#!/usr/bin/env bash
# bash scripts/h200/sizing_call.sh FULL_TRACE [capacity|size]
# On the GPU machine, from the repo root, after `source scripts/h200/device_env.sh` succeeded.
#
# A sizing of recorded traffic, checked, in two steps that can be two calls of one warm machine:
#   capacity: capacity_call.sh's vLLM server (Qwen3-8B shapes, random weights, vLLM's defaults)
#             and `servetune capacity --trace` on the 90-s Mooncake window of
#             examples/h200/traces/ (lengths and prefix blocks scaled by 1/4, as the Mooncake
#             studies replay it), judged on mean TTFT and mean TPOT (a 90-s window of this bursty
#             traffic leaves p90 levels undecided: docs/results/mooncake-gpu.md)
#   size:     `servetune size` of that capacity for GROWTH (default 3) times FULL_TRACE's busiest
#             minute (the same scaling),
#             and --check: the busiest replica's share, dealt by session as a prefix-aware
#             balancer would, replayed against the same server
# The state lives in /tmp/st-size (survives while the machine stays warm); each call copies it
# all to $OUT: mooncake-cap.json (+ .log), size.json (+ .log), and the runs as tar.xz.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 1 ] || { echo "usage: sizing_call.sh FULL_TRACE [capacity|size]" >&2; exit 2; }
FULL="$1"; STEP="${2:-capacity}"
DEST="${OUT:-/tmp/st-out}"; STATE=/tmp/st-size; mkdir -p "$DEST" "$STATE"
export MODEL_DIR="${MODEL_DIR:-/tmp/gpukit/models/qwen3-8b}" PORT="${PORT:-8011}"
WINDOW=examples/h200/traces/mooncake-1575s-90s.jsonl
SETS=(--trace-set token_scale=0.25 --trace-set block_size=512)
SLOS=(--slo ttft:mean=1000 --slo tpot:mean=40)
GROWTH="${GROWTH:-3}"
# The server capacity_call.sh starts is this script's own, not another tenant: the machine
# record still names it.
export SERVETUNE_ALLOW_BUSY=1

case "$STEP" in
  capacity)
    OUT="$STATE" bash "$HERE/capacity_call.sh" mooncake-cap - --trace "$WINDOW" "${SETS[@]}" "${SLOS[@]}" \
      --start 1.5 --max-level 6 --rel-tol 0.15 --max-levels 6 --max-runs-per-level 2
    ;;
  size)
    t0=$(date +%s)
    servetune size "$STATE/mooncake-cap.json" --trace "$FULL" "${SETS[@]}" --growth "$GROWTH" --balance session \
      --price-per-gpu-hour 3.5 --check --url "http://127.0.0.1:$PORT" --tokenizer "$MODEL_DIR" \
      --out "$STATE/size.json" --force > "$STATE/size.log" 2>&1
    echo "size: rc=$? wall=$(( $(date +%s) - t0 ))s" | tee -a "$STATE/size.log"
    cat "$STATE/size.log"
    ;;
  *) echo "sizing_call.sh: step is capacity or size, not $STEP" >&2; exit 2 ;;
esac
cp "$STATE"/*.json "$STATE"/*.log "$DEST"/ 2>/dev/null
tar -C "$STATE" -cJf "$DEST/sizing-runs.tar.xz" $(cd "$STATE" && ls -d *.runs 2>/dev/null) 2>/dev/null
ls -la "$DEST"
