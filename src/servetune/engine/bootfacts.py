"""BootFacts: what a server's start-up log says about the configuration that took effect.

The record is shared by every engine (`engine` names which one wrote it, `engine_version` its
version); this module parses vLLM's log, `engine/sglang_log.py` SGLang's.

Known log dialects (excerpts kept under tests/fixtures/logs/):
- 0.26 (GPU): "GPU KV cache size: 814,368 tokens" and, on the next line,
  "Maximum concurrency for 40,960 tokens per request: 19.88x".
- 0.32 (GPU or CPU): one line, "CPU KV cache size: 58,240 tokens, Maximum concurrency for ...";
  with --max-model-len -1, "Auto-fit max_model_len: reduced from 16384 to 3968 ..." says the length.
Each fact is optional: a missing line leaves None, never an error.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

# "(EngineCore pid=123) INFO 11-30 07:29:17 [file.py:42] message" -> level, message.
_LINE = re.compile(
    r"^(?:\((?P<proc>[^()]+?) pid=\d+\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?(?P<msg>.*)$"
)

_VERSION_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)")
_VERSION_BANNER = re.compile(r"\bversion\s+(?P<v>\d+\.\d+\.\d+\S*)")
_NON_DEFAULT = re.compile(r"non-default args: (?P<d>\{.*\})\s*$")
_KV_TOKENS = re.compile(r"(?P<dev>[A-Za-z]+(?: \+ host)?) KV cache size: (?P<n>[\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<t>[\d,]+) tokens per request: (?P<x>[\d,.]+)x")
_KV_MEMORY = re.compile(
    r"Available KV cache memory: (?P<g>[\d.]+) GiB"  # GPU
    r"|(?:Explicitly|Auto) set \((?P<cpu>[\d.]+)/[\d.]+\) GiB for KV cache"  # CPU
)
_MODEL_LOAD = re.compile(r"Model loading took (?P<g>[\d.]+) GiB(?: memory)? and (?P<s>[\d.]+) seconds")
_MODEL_INIT = re.compile(r"Initializing model took (?P<s>[\d.]+) seconds")  # CPU: no GiB figure
_COMPILE = re.compile(r"torch\.compile (?:and initial profiling/warmup run together )?took (?P<s>[\d.]+) s in total")
_GRAPHS = re.compile(r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<g>-?[\d.]+) GiB")
_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) s")
_ASYNC = re.compile(r"Asynchronous scheduling is (?P<state>enabled|disabled)")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)")
_MAX_MODEL_LEN = re.compile(r"Using max model len (?P<n>\d+)")
# --max-model-len -1 (0.32): the engine fits the length after the lines above were logged
_AUTO_FIT = re.compile(r"Auto-fit max_model_len: (?:reduced from \d+ to (?P<n>\d+)|full model context length "
                       r"(?P<full>\d+) fits)")
_ATTENTION = re.compile(r"Using (?P<b>[A-Z][A-Z0-9_]*) (?:attention )?backend\b")
_ENGINE_CONFIG = re.compile(r"Initializing a V1 LLM engine \([^)]*\) with config: (?P<cfg>.*)$")
_MAMBA_MODE = re.compile(r"Mamba cache mode is set to '(?P<mode>\w+)'")
_DEFAULT_MOE = re.compile(r"Using default MoE config")
# vLLM's platform check of the server's VLLM_* variables (platforms/interface.py validate_environ)
_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: (?P<name>\w+)")
# The line servetune's vLLM plug-in prints (engine/vllm_plugin): variable -> value vLLM resolved,
# null for a variable this vLLM does not know.
KNOB_REPORT_PREFIX = "servetune-knobs: "
_KNOB_REPORT = re.compile(re.escape(KNOB_REPORT_PREFIX) + r"(?P<json>\{.*\})\s*$")
# vLLM >= 0.21 counts CUDA graph memory against the pool (v1/worker/gpu_worker.py): "The current
# --gpu-memory-utilization=0.4500 is equivalent to --gpu-memory-utilization=0.4434 without CUDA
# graph memory profiling. To maintain the same effective KV cache size as before, increase
# --gpu-memory-utilization to 0.4566."; with the profiling off: "... increasing
# --gpu-memory-utilization from 0.4500 to 0.4566."
_GRAPH_ACCOUNTING = re.compile(
    r"current --gpu-memory-utilization=(?P<cur>\d+(?:\.\d+)?) is equivalent to "
    r"--gpu-memory-utilization=(?P<eq>\d+(?:\.\d+)?) without CUDA graph memory profiling.*?"
    r"increase --gpu-memory-utilization to (?P<keep>\d+(?:\.\d+)?)"
    r"|increasing --gpu-memory-utilization from (?P<off_cur>\d+(?:\.\d+)?) to (?P<off_keep>\d+(?:\.\d+)?)")
_MOE_CONFIG = re.compile(r"Using configuration from (?P<path>.+?) for MoE layer")
_MOE_BACKEND = re.compile(r"Using (?P<b>\S+) MoE backend\b")  # "Using TritonExperts MoE backend"
# "Using FlashInfer for top-p & top-k sampling." / "... Falling back to the PyTorch-native
# implementation of top-p & top-k sampling." / "FlashInfer top-p/top-k sampling unavailable: ..."
_SAMPLER = re.compile(r"top-p (?:&|/) top-k sampling|top-p/top-k sampling")
# Where torch.compile's artifacts of this boot live (vLLM's compile cache, engine/cache.py)
_COMPILE_CACHE = re.compile(r"(?:Using cache directory: |saved AOT compiled function to |Directly load AOT compilation "
                            r"from path |Compiling model again due to a load failure from )(?P<path>\S+?)(?:,|\s|$)")
_COMPILE_LOAD_FAILED = re.compile(r"Compiling model again due to a load failure from (?P<path>\S+?)(?:,|\s|$)")


class BootFacts(BaseModel):
    """Facts from one server start. Sizes in GiB, durations in seconds, None = not in the log."""

    # Stores written before the record was shared hold `vllm_version`: read as the engine's version.
    model_config = ConfigDict(populate_by_name=True)

    engine: str = "vllm"  # the engine kind whose log this is (engine/registry.py)
    engine_version: str | None = Field(default=None, validation_alias=AliasChoices("engine_version", "vllm_version"))
    non_default_args: dict[str, Any] = Field(default_factory=dict)
    engine_config: dict[str, str] = Field(default_factory=dict)  # "with config: k=v, ..." as text
    compilation_config: dict[str, str] = Field(default_factory=dict)  # engine_config's compilation_config
    kv_cache_device: str | None = None  # "GPU", "CPU", ...
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None  # the request length max_concurrency is quoted for
    kv_cache_memory_gib: float | None = None
    model_load_seconds: float | None = None
    model_load_gib: float | None = None
    torch_compile_seconds: float | None = None
    cuda_graph_seconds: float | None = None
    cuda_graph_gib: float | None = None
    engine_init_seconds: float | None = None
    async_scheduling: bool | None = None
    attention_backend: str | None = None
    max_num_batched_tokens: int | None = None  # from the chunked-prefill line
    max_model_len: int | None = None
    mamba_cache_mode: str | None = None  # set by the model/platform, not by the user
    default_moe_config: bool = False  # no tuned fused-MoE config for this device: slow kernels
    unknown_env: list[str] = Field(default_factory=list)  # VLLM_* variables this vLLM warns it does not know
    # VLLM_* variable -> the value the server resolved (vllm.envs), None: unknown to it; only
    # variables the launcher asked the plug-in about (engine/vllm_plugin)
    resolved_env: dict[str, str | None] = Field(default_factory=dict)
    # vLLM's profiler estimate of CUDA graph memory, as --gpu-memory-utilization values: the one the
    # server ran with, what it equals without counting graph memory (profiling on), and the one that
    # keeps the KV cache of the other accounting (profiling on: as before it; off: with graphs counted)
    graph_memory_profiled: bool | None = None
    gpu_memory_utilization_logged: float | None = None
    gpu_memory_utilization_without_graphs: float | None = None
    gpu_memory_utilization_to_keep_kv: float | None = None
    moe_config_file: str | None = None  # the tuned fused-MoE config file the engine loaded
    moe_backend: str | None = None  # the fused-MoE experts kernel ("TritonExperts")
    sampler: str | None = None  # the top-p/top-k sampler line (FlashInfer, PyTorch-native, ...)
    notable: list[str] = Field(default_factory=list)  # lines worth a user's attention
    warnings: list[str] = Field(default_factory=list)  # every distinct WARNING message
    evidence: dict[str, str] = Field(default_factory=dict)  # fact name -> the log line it came from
    startup_seconds: float | None = None  # measured by the launcher: launch -> /health 200
    # SGLang's (engine/sglang_log.py): the scheduler's cap on running requests, the batch sizes
    # CUDA graphs were captured for, the device memory left when the KV pool was allocated, and
    # every resolved argument of its `server_args=ServerArgs(...)` line (what the applied check reads)
    max_running_requests: int | None = None
    cuda_graph_batch_sizes: list[int] = Field(default_factory=list)
    memory_pool_free_gib: float | None = None
    resolved_args: dict[str, Any] = Field(default_factory=dict)
    compile_cache_paths: list[str] = Field(default_factory=list)  # compile-cache directories the log names
    compile_cache_load_failed: list[str] = Field(default_factory=list)  # of those, the ones it could not load


def parse_boot_facts(text: str) -> BootFacts:
    """Parse a server log (whole or its start-up part). Later lines win where a fact repeats:
    the engine process logs the final value after the API server logs a provisional one."""
    facts = BootFacts()
    seen_warnings: set[str] = set()
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _LINE.match(line)
        level, msg = (m["level"], m["msg"]) if m else (None, line)
        if level == "WARNING" and msg not in seen_warnings:
            seen_warnings.add(msg)
            facts.warnings.append(msg)
        _scan(facts, msg, line)
    return facts


def log_message(line: str) -> str:
    """A log line without vLLM's "(Proc pid=N) LEVEL date [file:line]" prefix."""
    m = _LINE.match(line.rstrip())
    return m["msg"] if m else line


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _scan(f: BootFacts, msg: str, line: str) -> None:  # noqa: C901 - one flat list of line kinds
    def found(name: str) -> None:
        f.evidence[name] = line

    if (m := _VERSION_ENGINE.search(msg)) or (f.engine_version is None and (m := _VERSION_BANNER.search(msg))):
        f.engine_version = m["v"]
        found("engine_version")
    if m := _NON_DEFAULT.search(msg):
        f.non_default_args = _literal_dict(m["d"])
        found("non_default_args")
    if m := _ENGINE_CONFIG.search(msg):
        f.engine_config = split_engine_config(m["cfg"])
        found("engine_config")
        f.compilation_config = split_repr_dict(f.engine_config.get("compilation_config", ""))
        if "max_seq_len" in f.engine_config and f.engine_config["max_seq_len"].isdigit():
            f.max_model_len = int(f.engine_config["max_seq_len"])
            found("max_model_len")
    if m := _KV_TOKENS.search(msg):
        f.kv_cache_device, f.kv_cache_tokens = m["dev"], int(_num(m["n"]))
        found("kv_cache_tokens")
    if m := _CONCURRENCY.search(msg):
        f.max_concurrency_tokens, f.max_concurrency = int(_num(m["t"])), _num(m["x"])
        found("max_concurrency")
    if m := _KV_MEMORY.search(msg):
        f.kv_cache_memory_gib = float(m["g"] or m["cpu"])
        found("kv_cache_memory_gib")
    if m := _MODEL_LOAD.search(msg):
        f.model_load_gib, f.model_load_seconds = float(m["g"]), float(m["s"])
        found("model_load")
    elif f.model_load_seconds is None and (m := _MODEL_INIT.search(msg)):
        f.model_load_seconds = float(m["s"])
        found("model_load")
    if m := _COMPILE.search(msg):
        f.torch_compile_seconds = float(m["s"])
        found("torch_compile_seconds")
    if m := _GRAPHS.search(msg):
        f.cuda_graph_seconds, f.cuda_graph_gib = float(m["s"]), float(m["g"])
        found("cuda_graph")
    if m := _ENGINE_INIT.search(msg):
        f.engine_init_seconds = float(m["s"])
        found("engine_init_seconds")
    if m := _ASYNC.search(msg):
        f.async_scheduling = m["state"] == "enabled"
        found("async_scheduling")
    if m := _CHUNKED.search(msg):
        f.max_num_batched_tokens = int(m["n"])
        found("max_num_batched_tokens")
    if m := _MAX_MODEL_LEN.search(msg):
        f.max_model_len = int(m["n"])
        found("max_model_len")
    if m := _AUTO_FIT.search(msg):
        f.max_model_len = int(m["n"] or m["full"])
        found("max_model_len")
    if f.attention_backend is None and (m := _ATTENTION.search(msg)):
        f.attention_backend = m["b"]
        found("attention_backend")
    if m := _MAMBA_MODE.search(msg):
        f.mamba_cache_mode = m["mode"]
        found("mamba_cache_mode")
        f.notable.append(msg)
    if (m := _UNKNOWN_ENV.search(msg)) and m["name"] not in f.unknown_env:
        f.unknown_env.append(m["name"])
        found(f"env.{m['name']}")
    if m := _KNOB_REPORT.search(line):
        f.resolved_env.update(_knob_report(m["json"]))
        found("resolved_env")
    if m := _GRAPH_ACCOUNTING.search(msg):
        f.graph_memory_profiled = m["cur"] is not None
        f.gpu_memory_utilization_logged = float(m["cur"] or m["off_cur"])
        f.gpu_memory_utilization_without_graphs = float(m["eq"]) if m["eq"] else None
        f.gpu_memory_utilization_to_keep_kv = float(m["keep"] or m["off_keep"])
        found("graph_memory_accounting")
        f.notable.append(msg)
    if m := _MOE_CONFIG.search(msg):
        f.moe_config_file = m["path"]
        found("moe_config_file")
    if m := _MOE_BACKEND.search(msg):
        f.moe_backend = m["b"]
        found("moe_backend")
    if _SAMPLER.search(msg):
        f.sampler = msg.strip()
        found("sampler")
    if (m := _COMPILE_CACHE.search(msg)) and m["path"] not in f.compile_cache_paths:
        f.compile_cache_paths.append(m["path"])
        found("compile_cache_paths")
    if (m := _COMPILE_LOAD_FAILED.search(msg)) and m["path"] not in f.compile_cache_load_failed:
        f.compile_cache_load_failed.append(m["path"])
    if _DEFAULT_MOE.search(msg) and not f.default_moe_config:
        f.default_moe_config = True
        found("default_moe_config")
        f.notable.append(msg)


def _knob_report(text: str) -> dict[str, str | None]:
    """The plug-in's JSON object; anything else (a line cut short) reads as nothing reported."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): None if v is None else str(v) for k, v in value.items()}


def _literal_dict(text: str) -> dict[str, Any]:
    """The dict vLLM prints with %s. Values that are object reprs, not literals (a parsed
    `CompilationConfig(...)`), are kept as their text; the rest are real Python values."""
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return value
    except (ValueError, SyntaxError):
        pass
    out: dict[str, Any] = {}
    for key, raw in split_repr_dict(text).items():
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def split_engine_config(text: str) -> dict[str, str]:
    """`k=v, k2={'a': 1}, ...` -> {k: "v", k2: "{'a': 1}"}. Values stay text: this line is repr
    output, not a literal (`dtype=torch.bfloat16`, `mode=<CompilationMode.X: 2>`)."""
    items: dict[str, str] = {}
    for item in _split_top(text):
        key, sep, value = item.partition("=")
        if sep and key.strip().isidentifier():
            items[key.strip()] = _unquote(value.strip())
    return items


def split_repr_dict(text: str) -> dict[str, str]:
    """`{'a': 1, 'b': <Enum.X: 2>}` (a dict's repr, not always a literal) -> {a: "1", b: "<Enum.X: 2>"}."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return {}
    items: dict[str, str] = {}
    for item in _split_top(body[1:-1]):
        key, sep, value = item.partition(":")
        if sep:
            items[_unquote(key.strip())] = value.strip()
    return items


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value
