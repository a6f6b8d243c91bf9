#!/usr/bin/env bash
# Build the docs site (mkdocs-material, mkdocs.yml) with --strict: a broken link, a page missing
# from the nav or a warning fails the build. The study file reference is generated from the code
# at build time (scripts/mkdocs_hooks.py). Needs the docs extra: pip install -e '.[docs]'.
# Not --quiet: it drops the warnings before --strict counts them, and the build "passes" with them.
#   usage: scripts/docs.sh [SITE_DIR]      (default: a temporary directory, removed afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
site=${1:-}
if [ -z "$site" ]; then
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
fi
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir "$site"
echo "docs: built $site"
