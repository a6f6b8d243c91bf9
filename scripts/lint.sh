#!/usr/bin/env bash
# Lint: ruff over the code and its tests, mypy over the package, and the docs site built with
# --strict (scripts/docs.sh: a broken link or a page left out fails). ruff and mypy read their settings from
# pyproject.toml ([tool.ruff], [tool.mypy]: packages = servetune under mypy_path = src). Needs the
# .venv that scripts/setup.sh makes (ruff and mypy come with the test extras); mypy checks against
# the libraries installed there, mkdocs comes with the docs extras. Runs all three and fails if any does.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
.venv/bin/python -m ruff check src tests scripts benchmarks || status=1
.venv/bin/python -m mypy || status=1
bash scripts/docs.sh || status=1
exit "$status"
