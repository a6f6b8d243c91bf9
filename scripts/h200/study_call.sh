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
#
# DETACH=TOTAL (seconds): the tuner runs in a session of its own (setsid) for TOTAL seconds from
# its start, so it outlives this call and keeps its server: the next call of a batch attaches to
# it instead of booting the trial's config again (75-140 s a call saved). This call then watches
# it for at most SECONDS and returns with it still running; the call in which TOTAL runs out sees
# it stop. Calls of one batch follow each other within the machine's 30-s warm window; if one does
# not come, the machine goes back with the tuner and the last snapshot is what is left.
#
# What comes back in $OUT: NAME.tar.xz (the whole study dir, refreshed every SNAPSHOT_S = 60 s
# and at the end, so a call killed by its time limit still returns a recent consistent store;
# cut into NAME.tar.xz.part0, .part1, ... above 15 MiB, since a call returns files of at most
# 16 MiB) and tune-NAME.log (what the tuner printed during this call). Also writes the model
# directory the study names when it is missing.
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
TUNER_PID="/tmp/st-runs/$NAME.tuner.pid"; TUNER_LOG="/tmp/st-runs/tune-$NAME.log"; TUNER_RC="/tmp/st-runs/$NAME.tuner.rc"
tuner_running() { [ -f "$TUNER_PID" ] && kill -0 "$(cat "$TUNER_PID")" 2>/dev/null; }
snap() { python3 "$HERE/snapshot.py" "$RUN_DIR" "$DEST/$NAME.tar.xz" --part-mib 15; }

if tuner_running; then
  echo "st: attaching to the tuner still running (pid $(cat "$TUNER_PID"))"
else
  rm -f "$TUNER_RC" "$TUNER_PID"; : > "$TUNER_LOG"
  tune_s="${DETACH:-$SECS}"
  # The wrapper writes its own pid (setsid may fork) and, at the end, the tuner's exit status.
  # timeout resets SIGINT for the tuner, which a background job would otherwise ignore;
  # -k: if the tuner has not stopped 45 s after SIGINT, SIGKILL (a resume finds its server then).
  launch=(bash -c 'echo $$ > "$0"; timeout -s INT -k 45 "${@:2}"; echo $? > "$1"'
          "$TUNER_PID" "$TUNER_RC" "$tune_s" servetune tune "$STUDY" --out "$RUN_DIR" "$@")
  if [ -n "${DETACH:-}" ]; then setsid "${launch[@]}" >> "$TUNER_LOG" 2>&1 < /dev/null &
  else "${launch[@]}" >> "$TUNER_LOG" 2>&1 < /dev/null &
  fi
  for _ in $(seq 50); do [ -s "$TUNER_PID" ] && break; sleep 0.1; done
  echo "st: tune $STUDY for at most $tune_s s${DETACH:+ (detached: later calls attach)}"
fi
log_from=$(( $(stat -c %s "$TUNER_LOG") + 1 ))
tail -c "+$log_from" -f --pid "$(cat "$TUNER_PID")" "$TUNER_LOG" &
follower=$!
# Without DETACH the tuner's own limit is SECONDS: watch it to its end.
if [ -n "${DETACH:-}" ]; then watch_until=$(( t0 + SECS )); else watch_until=$(( t0 + 10**9 )); fi
last_snap=$(date +%s)
while tuner_running && [ "$(date +%s)" -lt "$watch_until" ]; do
  sleep 2
  if [ $(( $(date +%s) - last_snap )) -ge "${SNAPSHOT_S:-60}" ]; then
    [ -d "$RUN_DIR" ] && snap >/dev/null; last_snap=$(date +%s)
  fi
done
kill "$follower" 2>/dev/null; wait "$follower" 2>/dev/null
tail -c "+$log_from" "$TUNER_LOG" > "$DEST/tune-$NAME.log"
if tuner_running; then
  echo "st: tuner left running after $(( $(date +%s) - t0 )) s of this call; the next call attaches"
  snap
  exit 0
fi
rc=$(cat "$TUNER_RC" 2>/dev/null || echo 1)
echo "st: tune rc=$rc after $(( $(date +%s) - t0 )) s of this call (124 = stopped at the time limit)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1 | sed 's/^/st: GPU memory in use after tune: /'
snap
case $rc in 0|124|130) exit 0 ;; *) exit "$rc" ;; esac
