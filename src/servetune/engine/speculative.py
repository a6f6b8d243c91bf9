"""vLLM's speculative decoding as a config knob: the `--speculative-config` JSON flag.

`{method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 4}` proposes up to 3 tokens per
step from n-gram matches in the prompt (no draft weights, so it runs on the CPU build too);
`method: mtp`, `eagle`, `draft_model`, ... need a draft. A study sweeps whole mappings
(`space: {speculative-config: [null, {...}]}`) or one field of the baseline's mapping
(`space: {speculative-config.num_speculative_tokens: [1, 2, 3, 4]}`).
"""

from __future__ import annotations

from typing import Any

from .config import Config

FLAG = "speculative-config"
TOKENS_FIELD = "num_speculative_tokens"
# The space key that sweeps n with everything else of the baseline's mapping kept.
TOKENS_PARAM = f"{FLAG}.{TOKENS_FIELD}"


# config.json keys that count a model's multi-token-prediction (next-n) layers, by model family
# (DeepSeek-V3, GLM-4.5, MiMo: num_nextn_predict_layers; Qwen3-Next, Qwen3.5: mtp_num_hidden_layers).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
# The n an MTP sweep tries: the field's peaks were n = 3 on short prompts and n = 6 on long ones.
MTP_SWEEP = (1, 3, 6)


def mtp_layers(model_config: dict[str, Any] | None) -> int:
    """How many MTP layers a model's config.json declares (its text_config's too); 0: none."""
    for section in (model_config or {}, (model_config or {}).get("text_config") or {}):
        for key in MTP_LAYER_KEYS:
            value = section.get(key) if isinstance(section, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def spec_config(config: Config) -> dict[str, Any] | None:
    """The config's speculative-config mapping, None when speculative decoding is off."""
    value = config.flags.get(FLAG)
    return value if isinstance(value, dict) else None


def speculative_tokens(config: Config) -> int:
    """Tokens proposed per step: 0 without speculative decoding."""
    mapping = spec_config(config)
    n = mapping.get(TOKENS_FIELD) if mapping else None
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else 0


def method(config: Config) -> str | None:
    mapping = spec_config(config)
    value = mapping.get("method") if mapping else None
    return str(value) if value is not None else None


def differs_only_in_tokens(config: Config, base: Config) -> bool:
    """`config` is `base` with at most speculative decoding's n changed (or switched on or off):
    the configs an n-sweep compares."""
    if set(config.diff(base)) - {FLAG}:
        return False
    ours, theirs = spec_config(config), spec_config(base)
    if ours is None or theirs is None:
        return True
    return _without_tokens(ours) == _without_tokens(theirs)


def _without_tokens(mapping: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != TOKENS_FIELD}
