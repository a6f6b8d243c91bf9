#!/usr/bin/env bash
# The main job: set up everything, then run a small real tuning study on the embedded default
# engine (vLLM CPU build, tiny random-weight model) and write its report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
STUDY=${1:-examples/tiny-cpu.yaml}
OUT=${2:-runs/$(basename "$STUDY" .yaml)}
servetune tune "$STUDY" --out "$OUT"
servetune status "$OUT"
echo "report: $OUT/report.md and $OUT/report.html; winning config: $OUT/winner/"
