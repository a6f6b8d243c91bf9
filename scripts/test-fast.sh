#!/usr/bin/env bash
# The fast tier: unit tests without simulations, fuzzing, the browser or real processes (about a
# minute on 2 cores). ./scripts/test.sh still runs everything, this tier included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests/unit -m "not slow and not vllm" -q "$@"
