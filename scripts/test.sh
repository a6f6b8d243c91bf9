#!/usr/bin/env bash
# The test suite, in three pytest runs:
#   1. unit tests, two workers (one per core), while the A/B test's second vLLM build installs;
#   2. the fault-injection and end-to-end tests marked `concurrent` (they measure no time, pin no
#      core and signal no tuner), two at a time: mostly real vLLM boots, which leave a core idle;
#   3. the rest of them one at a time: they measure time, pin cores or send signals, and a second
#      test beside them would be noise in what they check.
# Then the suite's slowest tests and its real vLLM server boots (scripts/test_summary.py).
# docs/development.md says what each tier costs and how to add a test without adding a boot.
# With arguments, they go to one pytest run as they are (e.g. a file, -k, -n 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
reports=$(mktemp -d)
export SERVETUNE_TEST_BOOT_LOG="$reports/boots.jsonl"  # every run appends its boots (tests/boot_log.py)
second_vllm=""  # the second vLLM build's install, while it runs (below)
summary() {
  # a unit test failed while it ran: it is not needed (its own process group: pip's too)
  [ -z "$second_vllm" ] || kill -- "-$second_vllm" 2>/dev/null || true
  .venv/bin/python scripts/test_summary.py "$SERVETUNE_TEST_BOOT_LOG" "$reports"/*.xml; rm -rf "$reports"
}
trap summary EXIT

# pytest exits 5 when a marker selects no test; that is not a failure here.
run() { .venv/bin/python -m pytest "$@" || { status=$?; [ "$status" -eq 5 ] || exit "$status"; }; }
# The A/B test's second vLLM build (tests/e2e/test_ab_vllm.py) installs while the unit tests run:
# 69 s on the shared 2-core machine, 21 s of CPU, that the one-at-a-time run would
# otherwise wait for. Its fixture runs the script again, which then only checks the build, or
# installs it and fails with the script's output if this install failed.
setsid bash scripts/setup_second_vllm.sh >"$reports/second_vllm.log" 2>&1 &
second_vllm=$!
# --dist loadfile: a file's tests share one worker (module fixtures, fake servers) as they would serially.
run -n 2 --dist loadfile tests/unit --junitxml="$reports/unit.xml"
wait "$second_vllm" || echo "test.sh: the second vLLM build did not install here; the A/B test tries again"
second_vllm=""
# --dist loadfile: a file goes to one worker whole, so a study its tests share (the example study) runs once.
run -n 2 --dist loadfile -m concurrent tests/faults tests/e2e --junitxml="$reports/concurrent.xml"
run -m "not concurrent" tests/faults tests/e2e --junitxml="$reports/alone.xml"
