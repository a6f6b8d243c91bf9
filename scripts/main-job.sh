#!/usr/bin/env bash
# The main job: set up everything, then run a small real tuning study on the embedded default
# engine (vLLM CPU build, tiny random-weight model) and write its report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
STUDY=${1:-examples/tiny-cpu.yaml}
OUT=${2:-runs/$(basename "$STUDY" .yaml)}
# Exit 1 from tune: the study ran but its baseline produced no measurement (no verdict); show
# the status and the report anyway, then end with that code.
rc=0
servetune tune "$STUDY" --out "$OUT" || rc=$?
if [ -f "$OUT/study.sqlite" ]; then
    servetune status "$OUT" || true
fi
if [ -d "$OUT/winner" ]; then
    config="winning config: $OUT/winner/"
elif [ -d "$OUT/baseline" ]; then
    config="recommended config (nothing beat the baseline): $OUT/baseline/"
else
    config="no recommended config was written (no measured baseline)"
fi
if [ -f "$OUT/report.md" ]; then
    echo "report: $OUT/report.md and $OUT/report.html; $config"
else
    echo "no report was written; $config"
fi
exit "$rc"
