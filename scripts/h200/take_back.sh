#!/usr/bin/env bash
# bash scripts/h200/take_back.sh FILES_AT NAME "HEADER"
# Here, after a study call: takes what study_call.sh returned (FILES_AT is the reply's files_at)
# into the repo.
#   - repacks FILES_AT/NAME.tar.xz at xz 6 into docs/results/h200/NAME.tar.xz
#   - appends FILES_AT/tune-NAME.log to docs/results/h200/tune-NAME.log under "=== HEADER"
#   - moves the unpacked store to runs/h200/ and writes its report to
#     docs/results/h200/NAME-report/ (report.md and plots/)
# Nothing in the repo changes unless the returned store unpacks to NAME/.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: take_back.sh FILES_AT NAME HEADER" >&2; exit 2; }
FILES_AT="$(cd "$1" && pwd)" || { echo "take_back: no directory $1" >&2; exit 2; }
NAME="$2"; HEADER="$3"
cd "$(dirname "$0")/../.."
RESULTS=docs/results/h200
[ -f "$FILES_AT/$NAME.tar.xz" ] || { echo "take_back: no $FILES_AT/$NAME.tar.xz" >&2; exit 2; }

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
tar xf "$FILES_AT/$NAME.tar.xz" -C "$scratch"
[ -f "$scratch/$NAME/study.sqlite" ] || { echo "take_back: $FILES_AT/$NAME.tar.xz holds no $NAME/study.sqlite" >&2; exit 2; }
python3 scripts/h200/snapshot.py "$scratch/$NAME" "$RESULTS/$NAME.tar.xz" 6

if [ -f "$FILES_AT/tune-$NAME.log" ]; then
  { echo "=== $HEADER"; cat "$FILES_AT/tune-$NAME.log"; } >> "$RESULTS/tune-$NAME.log"
fi

mkdir -p runs/h200
rm -rf "runs/h200/$NAME"
mv "$scratch/$NAME" runs/h200/
.venv/bin/servetune report "runs/h200/$NAME" >/dev/null
mkdir -p "$RESULTS/$NAME-report/plots"
cp "runs/h200/$NAME/report.md" "$RESULTS/$NAME-report/"
cp "runs/h200/$NAME"/plots/*.png "$RESULTS/$NAME-report/plots/"
echo "take_back: $RESULTS/$NAME.tar.xz ($(du -h "$RESULTS/$NAME.tar.xz" | cut -f1)), $RESULTS/tune-$NAME.log, $RESULTS/$NAME-report/"
