# source scripts/h200/device_env.sh   -- on the H200, from the repo root, after .gpukit/kit/stage.sh.
# Installs .whl/*.whl (servetune + the dependencies the image lacks) into $ST_SITE, sources
# gpukit's env.sh (vLLM 0.26 on PYTHONPATH, offline caches under /tmp/gpukit), puts both on
# PYTHONPATH (and $ST_SITE/bin, with the `servetune` script, on PATH), then checks that every
# requirement of servetune, transitively, is installed in a version it accepts.
# Sourced, so it returns (never exits): `source ... && next` stops the chain on a failure.
ST_SITE="${ST_SITE:-/tmp/st-site}"
_st_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! ls "$_st_root"/.whl/servetune-*.whl >/dev/null 2>&1; then
  echo "st: no .whl/servetune-*.whl here (build it with scripts/h200/build_wheels.sh and carry .whl)" >&2
  return 1
fi
# A fresh site whenever the wheels differ from the installed ones (the servetune wheel keeps its
# version number across rebuilds, so pip alone would not see a change); the same wheels leave the
# site alone, since a tuner left running by study_call.sh's DETACH imports from it.
_st_stamp="$(cat "$_st_root"/.whl/*.whl | sha256sum | cut -c1-32)"
if [ "$(cat "$ST_SITE/.wheels-sha256" 2>/dev/null)" != "$_st_stamp" ]; then
  rm -rf "$ST_SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check --root-user-action=ignore \
    --target "$ST_SITE" "$_st_root"/.whl/*.whl || { echo "st: pip install into $ST_SITE failed" >&2; return 1; }
  echo "$_st_stamp" > "$ST_SITE/.wheels-sha256"
fi
source "$_st_root/.gpukit/kit/env.sh"
case ":$PYTHONPATH:" in *":$ST_SITE:"*) ;; *) export PYTHONPATH="$ST_SITE:$PYTHONPATH" ;; esac
case ":$PATH:" in *":$ST_SITE/bin:"*) ;; *) export PATH="$ST_SITE/bin:$PATH" ;; esac
export PYTHONUNBUFFERED=1
# Before stage.sh says READY (call 1), what gpukit brings (pydantic, ...) is not there yet: the check
# then covers the image's packages and the wheels only.
_st_kit_ready=0; [ -e "${GPUKIT:-/tmp/gpukit}/READY" ] && _st_kit_ready=1
ST_KIT_READY=$_st_kit_ready ST_KIT_DEPS="$_st_root/.gpukit/kit/deps-vllm-0.26.0.txt" python3 - <<'PYEOF' || return 1
import importlib.metadata as md
import os
import re
import sys

try:
    from packaging.requirements import Requirement
except ImportError:  # the image has packaging; pip's own copy otherwise
    from pip._vendor.packaging.requirements import Requirement

def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


kit_ready = os.environ["ST_KIT_READY"] == "1"
kit_names = set()
if not kit_ready:
    with open(os.environ["ST_KIT_DEPS"]) as f:
        kit_names = {norm(line.split("==")[0]) for line in f if line.strip() and not line.startswith("#")}
problems, seen, todo = [], set(), ["servetune"]
while todo:
    name = todo.pop()
    for text in md.requires(name) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = norm(req.name)
        if key in kit_names:
            continue  # comes with the gpukit chunks, not staged yet
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{req.name} missing (needed by {name})")
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} does not satisfy {req} (needed by {name})")
        if key not in seen:
            seen.add(key)
            todo.append(req.name)
shown = "servetune optuna sqlalchemy pydantic typer rich numpy scipy aiohttp tokenizers".split()
print("st: python", sys.version.split()[0], "|", " ".join(f"{n} {md.version(n)}" for n in shown if n in seen | {"servetune"}))
if problems:
    print("st: unmet requirements:", "; ".join(problems), file=sys.stderr)
    sys.exit(1)
if not kit_ready:
    print(f"st: {len(seen)} requirements met so far; gpukit not READY, so its packages and the imports are not checked")
    sys.exit(0)
import optuna, sqlalchemy, servetune.cli  # noqa: F401,E401  (imports, not only metadata)
print(f"st: {len(seen)} requirements of servetune met; servetune, optuna, sqlalchemy import")
PYEOF
