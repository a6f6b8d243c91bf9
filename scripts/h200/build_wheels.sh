#!/usr/bin/env bash
# Fills .whl/ (ignored by git) with what servetune needs on the H200 beyond gpukit:
# the pinned dependency wheels of wheels.txt (downloaded only when missing, cp312
# manylinux or pure Python) and a freshly built wheel of servetune itself.
# Run it before every device call that carries .whl: the servetune wheel is the
# code that runs there. Keeps exactly one wheel per package (two stop pip there).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WHL="$ROOT/.whl"
PY="${PYTHON:-python3}"                       # any pip that reaches the index
VENV_PY="${VENV_PY:-$ROOT/.venv/bin/python}"  # builds the servetune wheel
mkdir -p "$WHL"

# PEP 427 file names: lower case, runs of -_. as "_"
norm() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'; }

keep=("servetune")
while read -r pin; do
  name="${pin%%==*}"; version="${pin##*==}"; n="$(norm "$name")"; keep+=("$n")
  for f in "$WHL"/*.whl; do   # another version of this package: drop it
    [ -e "$f" ] || continue
    b="$(basename "$f")"
    [ "$(norm "${b%%-*}")" = "$n" ] && [[ "$b" != *"-$version-"* ]] && { echo "drop $b"; rm -f "$f"; }
  done
  if ! ls "$WHL/$n-$version-"*.whl >/dev/null 2>&1; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHL" "$pin"
  fi
done < <(grep -Ev '^\s*(#|$)' "$HERE/wheels.txt")

for f in "$WHL"/*.whl; do   # wheels of packages no longer pinned
  [ -e "$f" ] || continue
  b="$(basename "$f")"; n="$(norm "${b%%-*}")"
  [[ " ${keep[*]} " == *" $n "* ]] || { echo "drop $b (not in wheels.txt)"; rm -f "$f"; }
done

# servetune itself: always rebuilt (its version does not change between edits)
rm -f "$WHL"/servetune-*.whl
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$VENV_PY" -m pip wheel -q --no-deps -w "$tmp" "$ROOT"
mv "$tmp"/servetune-*.whl "$WHL/"
rm -rf "$ROOT/build"   # setuptools' leftovers

ls -1 "$WHL"
echo "$(du -sk "$WHL" | cut -f1) KiB in .whl"
