#!/usr/bin/env bash
# On the device, after `source scripts/h200/device_env.sh`: the two folders that
# examples/h200/qwen3-30b-a3b-moe-config.yaml points VLLM_TUNED_CONFIG_FOLDER at.
#   ROOT/tuned: vLLM's tuned E=128,N=768 config of the H200, under the file name vLLM looks for
#               on this GPU (its own get_config_file_name, so the name is never guessed)
#   ROOT/empty: no config: vLLM falls back to its own folder or the default config
#   usage: moe_config_dir.sh [ROOT]      (default /tmp/moe-config)
set -euo pipefail
ROOT="${1:-/tmp/moe-config}"
mkdir -p "$ROOT/tuned" "$ROOT/empty"
python3 - "$ROOT/tuned" <<'PY'
import os, shutil, sys
from vllm.model_executor.layers.fused_moe import fused_moe
name = fused_moe.get_config_file_name(128, 768, None)
src = os.path.join(os.path.dirname(os.path.realpath(fused_moe.__file__)), "configs",
                   "E=128,N=768,device_name=NVIDIA_H200.json")
shutil.copyfile(src, os.path.join(sys.argv[1], name))
print("moe config:", os.path.join(sys.argv[1], name))
PY
