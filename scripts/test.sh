#!/usr/bin/env bash
# The test suite: unit tests (two workers, one per core), then the fault-injection and end-to-end
# tests against a real vLLM (CPU build) one at a time: they start real servers, send signals and
# pin cores, and a second worker beside them would be noise in what they measure.
# With arguments, they go to one pytest run as they are (e.g. a file, -k, -n 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# --dist loadfile: a file's tests share one worker (module fixtures, fake servers) as they would serially.
.venv/bin/python -m pytest -n 2 --dist loadfile tests/unit
exec .venv/bin/python -m pytest tests/faults tests/e2e
