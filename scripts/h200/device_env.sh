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
# A fresh site every call: the servetune wheel keeps its version number across rebuilds.
rm -rf "$ST_SITE"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
  --target "$ST_SITE" "$_st_root"/.whl/*.whl || { echo "st: pip install into $ST_SITE failed" >&2; return 1; }
source "$_st_root/.gpukit/kit/env.sh"
case ":$PYTHONPATH:" in *":$ST_SITE:"*) ;; *) export PYTHONPATH="$ST_SITE:$PYTHONPATH" ;; esac
case ":$PATH:" in *":$ST_SITE/bin:"*) ;; *) export PATH="$ST_SITE/bin:$PATH" ;; esac
export PYTHONUNBUFFERED=1
python3 - <<'PYEOF' || return 1
import importlib.metadata as md
import sys

from packaging.requirements import Requirement

problems, seen, todo = [], set(), ["servetune"]
while todo:
    name = todo.pop()
    for text in md.requires(name) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = req.name.lower().replace("_", "-")
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{req.name} missing (needed by {name})")
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} does not satisfy {req}{' (' + name + ')'}")
        if key not in seen:
            seen.add(key)
            todo.append(req.name)
shown = "servetune optuna sqlalchemy pydantic typer rich numpy scipy aiohttp tokenizers".split()
print("st: python", sys.version.split()[0], "|", " ".join(f"{n} {md.version(n)}" for n in shown if n in seen | {"servetune"}))
if problems:
    print("st: unmet requirements:", "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"st: {len(seen)} requirements of servetune met")
PYEOF
