#!/usr/bin/env bash
# bash scripts/h200/study_call.sh STUDY.yaml SEED_DIR [SECONDS] [extra `servetune tune` args...]
# On the H200, from the repo root, after `source scripts/h200/device_env.sh` succeeded.
#
# Runs or resumes `servetune tune STUDY --out /tmp/st-runs/NAME` for at most SECONDS (default
# 540), then SIGINT: the tuner stops its server and leaves the store consistent. The store
# lives in /tmp, which survives from one call to the next while the machine stays warm; on a
# fresh machine it is seeded from SEED_DIR (the repo's copy, e.g. docs/results/h200/NAME, which
# travels with every call). So calls can follow each other without unpacking anything here in
# between. At the end the whole store goes back as $OUT/NAME.tar.gz, plus $OUT/tune-NAME.log.
# Also writes the model directory the study names (/tmp/gpukit/models/PRESET) when missing.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: study_call.sh STUDY.yaml SEED_DIR [SECONDS] [tune args...]" >&2; exit 2; }
STUDY="$1"; SEED="$2"; SECS="${3:-540}"; shift $(( $# >= 3 ? 3 : 2 ))
NAME="$(basename "$SEED")"
RUN_DIR="/tmp/st-runs/$NAME"
DEST="${OUT:-/tmp/st-out}"; mkdir -p "$DEST" /tmp/st-runs
t0=$(date +%s)

command -v servetune >/dev/null || { echo "st: servetune not on PATH (source scripts/h200/device_env.sh first)" >&2; exit 2; }

# The model directory: engine.model of the study, if it is one of servetune's presets under /tmp.
model="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["engine"]["model"])' "$STUDY")" || exit 2
if [ ! -f "$model/tokenizer.json" ]; then
  preset="$(basename "$model")"
  servetune model make "$preset" "$model" >/dev/null || { echo "st: cannot make model $preset at $model" >&2; exit 2; }
  echo "st: made model $preset at $model"
fi

if [ -d "$RUN_DIR" ]; then
  echo "st: resuming from $RUN_DIR (kept on this warm machine)"
elif [ -d "$SEED" ]; then
  cp -a "$SEED" "$RUN_DIR"; echo "st: seeded $RUN_DIR from $SEED"
else
  echo "st: new study in $RUN_DIR"
fi

nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
echo "st: tune $STUDY for at most $SECS s"
# -k: if the tuner has not stopped 45 s after SIGINT, SIGKILL (resume must find its server then)
timeout -s INT -k 45 "$SECS" servetune tune "$STUDY" --out "$RUN_DIR" "$@" 2>&1 | tee "$DEST/tune-$NAME.log"
rc=${PIPESTATUS[0]}
echo "st: tune rc=$rc after $(( $(date +%s) - t0 )) s (124 = stopped at the time limit)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/st: GPU memory in use after tune: /'
tar czf "$DEST/$NAME.tar.gz" -C /tmp/st-runs "$NAME" && echo "st: store -> $NAME.tar.gz ($(du -h "$DEST/$NAME.tar.gz" | cut -f1))"
case $rc in 0|124|130) exit 0 ;; *) exit "$rc" ;; esac
