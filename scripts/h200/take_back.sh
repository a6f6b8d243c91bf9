#!/usr/bin/env bash
# bash scripts/h200/take_back.sh FILES_AT NAME "HEADER" [EARLIER_FILES_AT ...]
# Here, after a study call: takes what study_call.sh returned (FILES_AT is the reply's files_at)
# into the repo. EARLIER_FILES_AT: the files_at of the same batch's earlier calls, whose tune logs
# go under HEADER before FILES_AT's (the last call's store holds all of them).
#   - repacks FILES_AT/NAME.tar.xz (or its parts NAME.tar.xz.part0, .part1, ... joined) at xz 6
#     into docs/results/h200/NAME.tar.xz
#   - appends the calls' tune-NAME.log to docs/results/h200/tune-NAME.log under "=== HEADER"
#   - moves the unpacked store to runs/h200/ and writes its report to
#     docs/results/h200/NAME-report/ (report.md and plots/)
# Nothing in the repo changes unless the returned store unpacks to NAME/.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: take_back.sh FILES_AT NAME HEADER [EARLIER_FILES_AT ...]" >&2; exit 2; }
FILES_AT="$(cd "$1" && pwd)" || { echo "take_back: no directory $1" >&2; exit 2; }
NAME="$2"; HEADER="$3"; shift 3
logs=()
for earlier in "$@"; do
  [ -f "$earlier/tune-$NAME.log" ] && logs+=("$(cd "$earlier" && pwd)/tune-$NAME.log")
done
[ -f "$FILES_AT/tune-$NAME.log" ] && logs+=("$FILES_AT/tune-$NAME.log")
cd "$(dirname "$0")/../.."
RESULTS=docs/results/h200
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
archive="$FILES_AT/$NAME.tar.xz"
if [ ! -f "$archive" ] && [ -f "$archive.part0" ]; then
  # snapshot.py --part-mib: join the parts in their numeric order (part10 after part9)
  n=0; while [ -f "$archive.part$n" ]; do cat "$archive.part$n"; n=$((n + 1)); done > "$scratch/joined.tar.xz"
  archive="$scratch/joined.tar.xz"
fi
[ -f "$archive" ] || { echo "take_back: no $FILES_AT/$NAME.tar.xz (nor its parts)" >&2; exit 2; }
tar xf "$archive" -C "$scratch"
[ -f "$scratch/$NAME/study.sqlite" ] || { echo "take_back: $FILES_AT/$NAME.tar.xz holds no $NAME/study.sqlite" >&2; exit 2; }
python3 scripts/h200/snapshot.py "$scratch/$NAME" "$RESULTS/$NAME.tar.xz" 6

if [ ${#logs[@]} -gt 0 ]; then
  { echo "=== $HEADER"; cat "${logs[@]}"; } >> "$RESULTS/tune-$NAME.log"
fi

mkdir -p runs/h200
rm -rf "runs/h200/$NAME"
mv "$scratch/$NAME" runs/h200/
.venv/bin/servetune report "runs/h200/$NAME" >/dev/null
mkdir -p "$RESULTS/$NAME-report/plots"
cp "runs/h200/$NAME/report.md" "$RESULTS/$NAME-report/"
cp "runs/h200/$NAME"/plots/*.png "$RESULTS/$NAME-report/plots/"
echo "take_back: $RESULTS/$NAME.tar.xz ($(du -h "$RESULTS/$NAME.tar.xz" | cut -f1)), $RESULTS/tune-$NAME.log, $RESULTS/$NAME-report/"
