#!/usr/bin/env bash
# The test suite: unit tests, then end-to-end tests against a real vLLM (CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest "$@"
