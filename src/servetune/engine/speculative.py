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
