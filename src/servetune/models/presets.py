"""Model directories for `--load-format dummy`: a real architecture's config, random weights.

The synthetic tokenizer is a WordLevel vocabulary of exactly `vocab_size` entries ("t0" ..
"tN", with Qwen's special tokens at their real ids), so every id a random model samples
detokenizes, and decode -> encode of ordinary ids round-trips exactly, which makes
token-exact prompts possible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ServetuneError

QWEN_SPECIAL_TOKENS = {
    151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>",
    151646: "<|object_ref_start|>", 151647: "<|object_ref_end|>",
    151648: "<|box_start|>", 151649: "<|box_end|>", 151650: "<|quad_start|>",
    151651: "<|quad_end|>", 151652: "<|vision_start|>", 151653: "<|vision_end|>",
    151654: "<|vision_pad|>", 151655: "<|image_pad|>", 151656: "<|video_pad|>",
    151657: "<tool_call>", 151658: "</tool_call>", 151659: "<|fim_prefix|>",
    151660: "<|fim_middle|>", 151661: "<|fim_suffix|>", 151662: "<|fim_pad|>",
    151663: "<|repo_name|>", 151664: "<|file_sep|>", 151665: "<tool_response>",
    151666: "</tool_response>", 151667: "<think>", 151668: "</think>",
}
EOS_ID = 151645
BOS_ID = 151643

# Field names and values of the published config.json files (Qwen/Qwen3-8B,
# Qwen/Qwen3-30B-A3B), as read by transformers' Qwen3Config / Qwen3MoeConfig.
_QWEN3_COMMON: dict[str, Any] = {
    "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": BOS_ID, "eos_token_id": EOS_ID,
    "head_dim": 128, "hidden_act": "silu", "initializer_range": 0.02,
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}
_DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"}

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-8b": {
        **_QWEN3_COMMON, **_DENSE, "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "max_window_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8,
    },
    "qwen3-30b-a3b": {
        **_QWEN3_COMMON, **_MOE, "hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 48, "max_window_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": 768,
        "norm_topk_prob": True, "num_experts": 128, "num_experts_per_tok": 8,
        "output_router_logits": False, "router_aux_loss_coef": 0.001,
    },
    # A few MB of bf16 weights: starts in seconds on a CPU once vLLM is imported.
    "tiny": {
        **_QWEN3_COMMON, **_DENSE, "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "max_window_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "vocab_size": 4096, "max_position_embeddings": 16384,
        "bos_token_id": 4094, "eos_token_id": 4095, "tie_word_embeddings": True,
    },
}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def special_tokens(config: dict[str, Any]) -> dict[int, str]:
    """Qwen's special tokens where the vocabulary has room for them; small vocabularies
    put the chat and end tokens at the top ids instead."""
    vocab = int(config["vocab_size"])
    if vocab > max(QWEN_SPECIAL_TOKENS):
        return dict(QWEN_SPECIAL_TOKENS)
    return {vocab - 3: "<|im_start|>", vocab - 2: "<|endoftext|>", vocab - 1: "<|im_end|>"}


def make_model(preset: str, out_dir: Path) -> Path:
    if preset not in PRESETS:
        raise ServetuneError(f"unknown model preset {preset!r}; known: {', '.join(PRESETS)}")
    config = dict(PRESETS[preset])
    special = special_tokens(config)
    by_text = {t: i for i, t in special.items()}
    config["eos_token_id"] = by_text["<|im_end|>"]
    config["bos_token_id"] = by_text["<|endoftext|>"]
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / "config.json", config)
    _write_json(out_dir / "generation_config.json", {
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": [config["eos_token_id"], config["bos_token_id"]],
        "transformers_version": "4.51.0",
    })
    _write_tokenizer(out_dir, int(config["vocab_size"]), special)
    return out_dir


def _write_tokenizer(out_dir: Path, vocab_size: int, special: dict[int, str]) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {special.get(i, f"t{i}"): i for i in range(vocab_size)}
    unk = "t0"  # WordLevel needs one; any word outside the vocabulary maps to id 0
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for _, t in sorted(special.items())]
    )
    tokenizer.save(str(out_dir / "tokenizer.json"))
    eos = next(t for t in special.values() if t == "<|im_end|>")
    pad = next(t for t in special.values() if t == "<|endoftext|>")
    added = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, t in sorted(special.items())
    }
    _write_json(out_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None, "eos_token": eos, "pad_token": pad, "unk_token": unk,
        "clean_up_tokenization_spaces": False, "model_max_length": 1 << 30,
        "split_special_tokens": False, "errors": "replace",
        "chat_template": CHAT_TEMPLATE,
    })
    _write_json(out_dir / "special_tokens_map.json", {"eos_token": eos, "pad_token": pad, "unk_token": unk})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
