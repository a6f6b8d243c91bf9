"""What a model's config.json says about its layers: which hold a KV cache and what one token of
it costs, which keep a recurrent state instead (Mamba, linear attention), and its experts.

A hybrid model's KV cache is only its attention layers' (Qwen3.5-35B-A3B: 10 of 40; the other 30
are linear attention with a fixed-size state per sequence). Configs name their layers in several
ways, each read here:
- `layer_types`: one entry per layer ("full_attention", "sliding_attention", "attention" hold
  KV; "linear_attention", "mamba", ... do not): Qwen3.5, Qwen3-Next, Gemma, Granite hybrids;
- `full_attention_interval` N: every N-th layer is full attention, the others linear (Qwen3-Next);
- `hybrid_override_pattern`: a character per layer, "*" attention, "M" Mamba, "-" MLP, "E"
  experts (Nemotron-H);
- `attn_layer_period` / `attn_layer_offset`: layer i is attention when i % period == offset (Jamba);
- `model_type` mamba / mamba2: no attention at all.
A multimodal wrapper keeps the language model's config under `text_config`; experts are named
`num_experts`, `num_local_experts` (Mixtral, Jamba) or `n_routed_experts` (DeepSeek).
`language_config` flattens these, so every reader sees one shape.
"""

from __future__ import annotations

from typing import Any

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "bfloat16": 2, "half": 2, "float8": 1, "int8": 1}
_NO_KV_LAYER = ("linear", "mamba", "conv", "recurrent", "ssm")
_ATTENTION_ONLY_FREE = ("mamba", "mamba2")


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config, flat: `text_config` merged over the wrapper's keys, the dtype
    under `torch_dtype`, the expert count under `num_experts` (and, for Mixtral-style configs whose
    experts are full MLPs, `moe_intermediate_size`)."""
    text = config.get("text_config")
    flat = {**{k: v for k, v in config.items() if k != "text_config"}, **text} if isinstance(text, dict) else dict(config)
    if "torch_dtype" not in flat and isinstance(flat.get("dtype"), str):
        flat["torch_dtype"] = flat["dtype"]  # transformers >= 4.56 writes `dtype`
    if not flat.get("num_experts"):
        experts = flat.get("num_local_experts") or flat.get("n_routed_experts")
        if experts:
            flat["num_experts"] = experts
            flat.setdefault("moe_intermediate_size", flat.get("intermediate_size"))
    return flat


def _layer_count(config: dict[str, Any]) -> int | None:
    value = config.get("num_hidden_layers")
    return value if isinstance(value, int) and value > 0 else None


def kv_layers(config: dict[str, Any]) -> int | None:
    """Layers that hold a KV cache; None when the config does not say how many layers it has."""
    config = language_config(config)
    types = config.get("layer_types")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return sum(1 for t in types if not any(word in t.lower() for word in _NO_KV_LAYER))
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*")
    layers = _layer_count(config)
    if layers is None:
        return None
    if str(config.get("model_type", "")).lower() in _ATTENTION_ONLY_FREE:
        return 0
    interval = config.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return sum(1 for i in range(layers) if (i + 1) % interval == 0)
    period, offset = config.get("attn_layer_period"), config.get("attn_layer_offset")
    if isinstance(period, int) and period > 0 and isinstance(offset, int):
        return sum(1 for i in range(layers) if i % period == offset)
    return layers


def is_hybrid(config: dict[str, Any]) -> bool:
    """Some layers keep a recurrent state (Mamba, linear attention) instead of a KV cache."""
    layers, with_kv = _layer_count(language_config(config)), kv_layers(config)
    if with_kv is None:
        return False
    pattern = language_config(config).get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return "M" in pattern
    return layers is not None and with_kv < layers


def kv_element_bytes(config: dict[str, Any], kv_cache_dtype: Any = None) -> float:
    """Bytes of one cached K or V element: an fp8 cache (`--kv-cache-dtype fp8*`) is one byte,
    `auto` (the default) the model's dtype."""
    dtype = str(kv_cache_dtype).lower() if kv_cache_dtype not in (None, "") else "auto"
    if dtype.startswith("fp8"):
        return 1.0
    if dtype != "auto" and dtype in DTYPE_BYTES:
        return float(DTYPE_BYTES[dtype])
    return float(DTYPE_BYTES.get(str(language_config(config).get("torch_dtype", "bfloat16")), 2))


def kv_bytes_per_token(config: dict[str, Any], kv_cache_dtype: Any = None) -> float:
    """One token's KV cache: 2 (K and V) x the layers that hold KV x KV heads x head size x bytes;
    0 when the config does not say."""
    flat = language_config(config)
    try:
        heads = int(flat.get("num_attention_heads", 1))
        head_dim = int(flat.get("head_dim") or flat.get("attention_head_dim") or int(flat["hidden_size"]) // heads)
        kv_heads = int(flat.get("num_key_value_heads", heads))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0.0
    layers = kv_layers(flat)
    if layers is None:
        return 0.0
    return 2 * layers * kv_heads * head_dim * kv_element_bytes(flat, kv_cache_dtype)


def describe_layers(config: dict[str, Any]) -> str | None:
    """'10 of 40 layers hold KV (the others: linear attention / Mamba)' for a hybrid, else None."""
    if not is_hybrid(config):
        return None
    return (f"{kv_layers(config)} of {_layer_count(language_config(config))} layers hold KV "
            "(the others keep a fixed-size linear-attention / Mamba state)")


def parameter_count(config: dict[str, Any]) -> float | None:
    """Weights of a decoder-only transformer (dense or mixture of experts) from its config.json
    (a hybrid's linear-attention layers counted as attention ones: an estimate of the size)."""
    config = language_config(config)
    try:
        hidden, layers, vocab = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["vocab_size"])
        heads = int(config.get("num_attention_heads", 1))
        kv_heads = int(config.get("num_key_value_heads", heads))
        head_dim = int(config.get("head_dim") or hidden // heads)
        experts = int(config.get("num_experts") or 0)
        mlp = (3 * hidden * int(config["moe_intermediate_size"]) * experts + hidden * experts if experts
               else 3 * hidden * int(config["intermediate_size"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return float(embeddings + layers * (attention + mlp))


def active_fraction(config: dict[str, Any], batch: int = 1) -> float:
    """The share of the weights a decode step of `batch` sequences reads: 1 for a dense model. For
    a mixture of experts, at batch 1 the active experts' share by parameter count (a lower bound at
    any batch: the roofline's); at larger batches the expected share if each token's k of E experts
    were uniform draws, E(1 - (1 - k/E)^batch) distinct experts (random weights route about so;
    trained routers are more skewed and read fewer)."""
    config = language_config(config)
    experts, per_token = config.get("num_experts"), config.get("num_experts_per_tok")
    if not experts or not per_token:
        return 1.0
    total = parameter_count(config)
    one, two = parameter_count({**config, "num_experts": 1}), parameter_count({**config, "num_experts": 2})
    if not total or one is None or two is None:
        return 1.0
    per_expert = two - one  # the count is linear in the number of experts
    distinct = experts * (1 - (1 - per_token / experts) ** max(batch, 1))  # = k at batch 1
    share: float = (one + (distinct - 1) * per_expert) / total
    return share
