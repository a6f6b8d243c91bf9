#!/usr/bin/env bash
# bash scripts/h200/study_call.sh STUDY.yaml SEED [SECONDS] [extra `servetune tune` args...]
# On the H200, from the repo root, after `source scripts/h200/device_env.sh` succeeded.
#
# Runs or resumes `servetune tune STUDY --out /tmp/st-runs/NAME` for at most SECONDS (default
# 540), then SIGINT: the tuner stops its server and leaves the store consistent. SEED is the
# repo's copy of the study, NAME.tar.xz (as this script returns it), an older NAME.tar.gz, or a
# directory NAME; it need
# not exist yet. The store lives in /tmp, which survives from one call to the next while the
# machine stays warm; only on a fresh machine is it seeded from SEED. So calls can follow each
# other without anything done on this side in between.
# What comes back in $OUT: NAME.tar.xz (the whole study dir, refreshed every SNAPSHOT_S = 60 s
# and at the end, so a call killed by its time limit still returns a recent consistent store)
# and tune-NAME.log. Also writes the model directory the study names when it is missing.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 2 ] || { echo "usage: study_call.sh STUDY.yaml SEED(.tar.xz|.tar.gz|dir) [SECONDS] [tune args...]" >&2; exit 2; }
STUDY="$1"; SEED="$2"; SECS="${3:-540}"; shift $(( $# >= 3 ? 3 : 2 ))
NAME="$(basename "$(basename "$SEED" .tar.gz)" .tar.xz)"
RUN_DIR="/tmp/st-runs/$NAME"
DEST="${OUT:-/tmp/st-out}"; mkdir -p "$DEST" /tmp/st-runs
t0=$(date +%s)

command -v servetune >/dev/null || { echo "st: servetune not on PATH (source scripts/h200/device_env.sh first)" >&2; exit 2; }

# The model directory: engine.model of the study; its basename is a `servetune model make` preset.
model="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["engine"]["model"])' "$STUDY")" || exit 2
if [ ! -f "$model/tokenizer.json" ]; then
  preset="$(basename "$model")"
  servetune model make "$preset" "$model" >/dev/null || { echo "st: cannot make model $preset at $model" >&2; exit 2; }
  echo "st: made model $preset at $model"
fi

if [ -d "$RUN_DIR" ]; then
  echo "st: resuming from $RUN_DIR (kept on this warm machine)"
elif [ -f "$SEED" ]; then
  tar xf "$SEED" -C /tmp/st-runs && [ -d "$RUN_DIR" ] || { echo "st: $SEED does not unpack to $NAME/" >&2; exit 2; }
  echo "st: seeded $RUN_DIR from $SEED"
elif [ -d "$SEED" ]; then
  cp -a "$SEED" "$RUN_DIR"; echo "st: seeded $RUN_DIR from $SEED"
else
  echo "st: new study in $RUN_DIR"
fi

nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>&1 | sed 's/^/st: GPU /'
( while sleep "${SNAPSHOT_S:-60}"; do
    [ -d "$RUN_DIR" ] && python3 "$HERE/snapshot.py" "$RUN_DIR" "$DEST/$NAME.tar.xz" >/dev/null
  done ) &
snapper=$!
echo "st: tune $STUDY for at most $SECS s"
# -k: if the tuner has not stopped 45 s after SIGINT, SIGKILL (a resume finds its server then)
timeout -s INT -k 45 "$SECS" servetune tune "$STUDY" --out "$RUN_DIR" "$@" 2>&1 | tee "$DEST/tune-$NAME.log"
rc=${PIPESTATUS[0]}
kill "$snapper" 2>/dev/null; wait "$snapper" 2>/dev/null
echo "st: tune rc=$rc after $(( $(date +%s) - t0 )) s (124 = stopped at the time limit)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1 | sed 's/^/st: GPU memory in use after tune: /'
python3 "$HERE/snapshot.py" "$RUN_DIR" "$DEST/$NAME.tar.xz"
case $rc in 0|124|130) exit 0 ;; *) exit "$rc" ;; esac
