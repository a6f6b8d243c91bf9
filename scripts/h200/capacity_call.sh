#!/usr/bin/env bash
# bash scripts/h200/capacity_call.sh LABEL [SRC] [servetune capacity args...]
# On the GPU machine, from the repo root, after `source scripts/h200/device_env.sh` succeeded.
#
# `servetune capacity --url` against one vLLM server (Qwen3-8B shapes, random weights) that stays
# up across the calls of a batch: the first call makes the model dir and starts the server in a
# session of its own (it outlives the call while the machine stays warm, 30 s between calls);
# later calls find it healthy and only search. So two builds of the capacity search can be
# compared on the same boot: SRC, when given and not "-", is a folder holding a `servetune`
# package that is put first on PYTHONPATH (an older build, e.g. `git archive COMMIT src`).
#
# What comes back in $OUT: LABEL.json (the search's result, rewritten as each level ends),
# LABEL.runs/ (each level's runs), LABEL.log (what it printed, with the wall time), serve.log
# (the server's log, in the call that started it).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: capacity_call.sh LABEL [SRC|-] [servetune capacity args...]" >&2; exit 2; }
LABEL="$1"; SRC="${2:--}"; shift $(( $# >= 2 ? 2 : 1 ))
DEST="${OUT:-/tmp/st-out}"; mkdir -p "$DEST"
MODEL_DIR="${MODEL_DIR:-/tmp/gpukit/models/qwen3-8b}"
PORT="${PORT:-8011}"; URL="http://127.0.0.1:$PORT"
SEARCH_S="${SEARCH_S:-540}"   # the search's own limit (SIGINT: it writes its bracket so far, exit 130)

healthy() { python3 - "$URL/health" <<'PY'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

if ! healthy; then
  if [ ! -f "$MODEL_DIR/tokenizer.json" ]; then
    servetune model make "$(basename "$MODEL_DIR")" "$MODEL_DIR" >/dev/null || { echo "cap: cannot make $MODEL_DIR" >&2; exit 2; }
  fi
  t0=$(date +%s)
  setsid python3 -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --served-model-name qwen3-8b \
    --load-format dummy --port "$PORT" --max-model-len 8192 > /tmp/cap-serve.log 2>&1 < /dev/null &
  echo "cap: vLLM starting (pid $!)"
  until healthy; do
    if [ $(( $(date +%s) - t0 )) -gt 420 ]; then echo "cap: server not healthy after 420 s" >&2; cp /tmp/cap-serve.log "$DEST/serve.log"; exit 3; fi
    sleep 2
  done
  echo "cap: server healthy after $(( $(date +%s) - t0 )) s"
  cp /tmp/cap-serve.log "$DEST/serve.log"
else
  echo "cap: server already up at $URL"
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>&1 | sed 's/^/cap: GPU /'

pypath="$PYTHONPATH"; [ "$SRC" != "-" ] && pypath="$(cd "$SRC" && pwd):$PYTHONPATH"
t0=$(date +%s.%N)
PYTHONPATH="$pypath" timeout -s INT -k 30 "$SEARCH_S" python3 -m servetune capacity --url "$URL" \
  --tokenizer "$MODEL_DIR" --out "$DEST/$LABEL.json" "$@" > "$DEST/$LABEL.log" 2>&1
rc=$?
wall=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0")
echo "cap: $LABEL rc=$rc wall=${wall}s (servetune from ${SRC/#-/the wheel})" | tee -a "$DEST/$LABEL.log"
tail -n 25 "$DEST/$LABEL.log"
