"""Model presets: tokenizer size and round trip, and config fields as transformers reads them."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from servetune.models.presets import PRESETS, make_model, special_tokens

# Keys of the published Qwen3 config.json files that transformers 5 renamed; it still reads them
# (and maps them) when it loads a config.json. Each maps to where transformers puts the value.
LEGACY_KEYS = {
    "torch_dtype": lambda cfg: str(cfg.dtype).removeprefix("torch."),
    "rope_theta": lambda cfg: cfg.rope_parameters["rope_theta"],
    "rope_scaling": None,  # None in every preset: nothing to map, only the key must be understood
}
# Keys the published Qwen/Qwen3-30B-A3B config.json carries that transformers' MoE code never reads.
PUBLISHED_UNUSED = {"qwen3_moe": {"max_window_layers"}}


@pytest.fixture(scope="module", params=sorted(PRESETS))
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(request.param, tmp_path_factory.mktemp(request.param))


def test_tokenizer_has_exactly_the_config_vocab_size(model_dir: Path) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == cfg["vocab_size"]
    ids = set(tok.get_vocab(with_added_tokens=True).values())
    assert ids == set(range(cfg["vocab_size"]))  # every id a random model can sample detokenizes


def test_decode_encode_round_trip(model_dir: Path) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    special = set(special_tokens(cfg))
    rng = np.random.default_rng(0)
    ordinary = [int(i) for i in rng.integers(0, cfg["vocab_size"], size=2000) if int(i) not in special]
    assert tok.encode(tok.decode(ordinary), add_special_tokens=False).ids == ordinary


@pytest.mark.slow
def test_transformers_tokenizer_loads_with_chat_template(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    cfg = json.loads((model_dir / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert len(tok) == cfg["vocab_size"]
    assert tok.eos_token_id == cfg["eos_token_id"]
    ids = tok.apply_chat_template([{"role": "user", "content": "t5 t6"}], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and 5 in ids and 6 in ids


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_fields_are_known_to_transformers(preset: str, tmp_path: Path) -> None:
    from transformers import AutoConfig, Qwen3Config, Qwen3MoeConfig

    fields = PRESETS[preset]
    cls = {"qwen3": Qwen3Config, "qwen3_moe": Qwen3MoeConfig}[fields["model_type"]]
    known = set(inspect.signature(cls.__init__).parameters) | set(cls().to_dict())
    undeclared = set(fields) - known - set(LEGACY_KEYS)
    # Undeclared keys still count when the modeling code reads them (e.g. the MoE attention's
    # `getattr(config, "head_dim", ...)`: 128 for Qwen3-30B-A3B, not hidden_size / heads = 64).
    modeling = inspect.getsource(importlib.import_module(cls.__module__.replace("configuration_", "modeling_")))
    read = {k for k in undeclared if f'"{k}"' in modeling or f"config.{k}" in modeling}
    unused = PUBLISHED_UNUSED.get(fields["model_type"], set())
    assert undeclared - read - unused == set(), f"{preset}: unknown to {cls.__name__}"
    assert unused <= undeclared - read  # the allowance is still needed: transformers does not read them

    loaded = AutoConfig.from_pretrained(str(make_model(preset, tmp_path)))
    assert type(loaded) is cls
    written = json.loads((tmp_path / "config.json").read_text())
    for key, value in written.items():
        if key in LEGACY_KEYS:
            if LEGACY_KEYS[key] is not None:
                assert LEGACY_KEYS[key](loaded) == value, key
        else:
            assert getattr(loaded, key) == value, key
