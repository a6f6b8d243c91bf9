"""Hybrid and MoE models known by their config.json: the layers that hold KV, an fp8 KV cache at
its size, the experts under a multimodal wrapper, and what the roofline and `init` make of them
(recorded config.json files: tests/fixtures/model-configs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_run import servetune

from servetune.models.architecture import (
    active_fraction,
    describe_layers,
    is_hybrid,
    kv_bytes_per_token,
    kv_layers,
    parameter_count,
)
from servetune.models.presets import PRESETS
from servetune.models.source import model_config
from servetune.study import load_study

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"


def recorded(name: str) -> dict:
    config: dict = json.loads((CONFIGS / f"{name}.json").read_text())
    return config


@pytest.mark.parametrize(("name", "with_kv", "layers"), [
    ("qwen3.5-35b-a3b-fp8", 10, 40),    # layer_types under text_config: the GB10 report's 10 + 30
    ("qwen3-next-80b-a3b", 12, 48),     # full_attention_interval 4
    ("nemotron-h-8b-base-8k", 4, 52),   # hybrid_override_pattern: four "*"
    ("jamba-v0.1", 4, 32),              # attention at i % 8 == 4
])
def test_a_hybrid_counts_only_its_attention_layers(name: str, with_kv: int, layers: int) -> None:
    config = recorded(name)
    assert kv_layers(config) == with_kv and is_hybrid(config)
    assert describe_layers(config) == (f"{with_kv} of {layers} layers hold KV "
                                       "(the others keep a fixed-size linear-attention / Mamba state)")


def test_a_dense_transformer_holds_kv_in_every_layer() -> None:
    assert kv_layers(PRESETS["qwen3-8b"]) == 36 and not is_hybrid(PRESETS["qwen3-8b"])
    assert describe_layers(PRESETS["qwen3-30b-a3b"]) is None


def test_an_fp8_kv_cache_is_counted_at_one_byte_an_element() -> None:
    qwen35 = recorded("qwen3.5-35b-a3b-fp8")
    # 2 (K, V) x 10 attention layers x 2 KV heads x 256 x bf16
    assert kv_bytes_per_token(qwen35) == kv_bytes_per_token(qwen35, "auto") == 2 * 10 * 2 * 256 * 2
    assert kv_bytes_per_token(qwen35, "fp8_e4m3") == kv_bytes_per_token(qwen35, "fp8") == 2 * 10 * 2 * 256
    assert kv_bytes_per_token(PRESETS["qwen3-8b"], "fp8") == kv_bytes_per_token(PRESETS["qwen3-8b"]) / 2
    # Nemotron-H names its head size attention_head_dim or leaves it to hidden / heads: 4096 / 32
    assert kv_bytes_per_token(recorded("nemotron-h-8b-base-8k")) == 2 * 4 * 8 * 128 * 2


def test_the_experts_of_a_multimodal_wrapper_are_counted(tmp_path: Path) -> None:
    """Qwen3.5-35B-A3B keeps its 256 experts under text_config: read flat, a token reads its
    8 of them (~3 B of ~35 B parameters), not every weight."""
    model = tmp_path / "qwen3.5"
    model.mkdir()
    shutil.copy(CONFIGS / "qwen3.5-35b-a3b-fp8.json", model / "config.json")
    config = model_config(model)
    assert config is not None and config["num_experts"] == 256
    assert active_fraction(config) == pytest.approx(3 / 35, rel=0.3)
    params = parameter_count(recorded("qwen3.5-35b-a3b-fp8"))
    assert params is not None and params == pytest.approx(35e9, rel=0.15)


def test_init_offers_the_mamba_cache_mode_for_a_hybrid_model_only(tmp_path: Path) -> None:
    hybrid = tmp_path / "hybrid"
    hybrid.mkdir()
    shutil.copy(CONFIGS / "qwen3.5-35b-a3b-fp8.json", hybrid / "config.json")
    study = tmp_path / "study.yaml"
    assert servetune("init", study, "--model", hybrid, "--gpus", "1", "--gpu-memory-gib", "128",
                     "--compute-capability", "12.1").code == 0
    spec = load_study(study)
    assert spec.space["mamba-cache-mode"].values == ("align", "none")
    (line,) = [ln for ln in study.read_text().splitlines() if ln.lstrip().startswith("mamba-cache-mode:")]
    assert "10 of 40 layers hold KV" in line
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps(PRESETS["qwen3-8b"]))
    assert servetune("init", study, "--model", dense, "--gpus", "1", "--force").code == 0
    assert "mamba-cache-mode" not in load_study(study).space


def test_experts_named_num_local_experts_are_experts_too() -> None:
    """Mixtral-8x7B (num_local_experts 8, 2 a token, whole MLPs as experts): 12.9 B of 46.7 B
    parameters active, by its model card; counted whole before."""
    mixtral = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "torch_dtype": "bfloat16"}
    assert parameter_count(mixtral) == pytest.approx(46.7e9, rel=0.02)
    assert active_fraction(mixtral) == pytest.approx(12.9 / 46.7, rel=0.05)
