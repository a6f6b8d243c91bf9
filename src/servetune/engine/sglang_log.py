"""SGLang's log: the boot facts, the applied check and the failure classes.

Line shapes are those of real SGLang output kept under tests/fixtures/logs/ (tests/fixtures/README.md
says where each came from): `[2025-11-30 12:50:10] message`, with a rank (`[... TP0]`,
`[... PP1 TP0]`) from scheduler processes and, in newer builds, a level and source
(`[...] INFO server_args.py:1830: message`). SGLang prints every resolved argument once, as
`server_args=ServerArgs(k=v, ...)` (a dataclass repr): that line is the applied check's evidence.
SGLang does not print its version at boot; the engine fills it in from its interpreter.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ..vocabulary import Outcome
from .applied import AppliedMismatch, same_value
from .bootfacts import BootFacts
from .classify import Failure, failure_from_rules, rule
from .config import Config, FlagValue, normalize_flag_name

_LINE = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (?P<rank>[^\]]*))?\] "
                   r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:[\w.]+:\d+: )?)?(?P<msg>.*)$")
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((?P<body>.*)\)\s*$")
# "KV Cache is allocated. #tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB" (0.5.x adds "dtype: ..., ")
_KV_ALLOCATED = re.compile(r"KV Cache is allocated\..*?#tokens: (?P<tokens>\d+), K size: (?P<k>[\d.]+) GB, "
                           r"V size: (?P<v>[\d.]+) GB")
_POOL_END = re.compile(r"Memory pool end\. avail mem=(?P<free>[\d.]+) GB")
_GRAPH_BS = re.compile(r"Capture cuda graph bs (?P<bs>\[[\d, ]*\])")
_GRAPH_END = re.compile(r"Capture cuda graph end\. Time elapsed: (?P<s>[\d.]+) s(?:\. mem usage=(?P<gib>[\d.]+) GB)?")
_LOAD_END = re.compile(r"Load weight end\..*?mem usage=(?P<gib>[\d.]+) GB")
# "max_total_num_tokens=2524524, chunked_prefill_size=8192, max_prefill_tokens=16384,
#  max_running_requests=4096, context_len=128000, available_gpu_mem=17.83 GB"
_SCHEDULER = re.compile(r"\bmax_total_num_tokens=(?P<tokens>\d+)(?P<rest>.*)")
_SCHEDULER_FIELD = re.compile(r"(?P<k>\w+)=(?P<v>-?\d+)\b")

# SGLang's failure words (real messages: tests/fixtures/SGLANG.md; the context-length one is
# model_config.py's ValueError, raised unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set).
# The first matching rule wins.
_RULES = [
    rule(Outcome.port_in_use, r"Address already in use|\[Errno 98\]", "port already in use"),
    rule(Outcome.context_too_long, r"User-specified context_length \(\d+\) is greater than the derived context_length",
         "the context length is longer than the model's"),
    rule(Outcome.oom, r"Not enough memory\. Please try to increase --mem-fraction-static|CUDA out of memory"
                      r"|OutOfMemoryError|is larger than the profiled value -\d+", "out of memory"),
    rule(Outcome.invalid_arg, r"launch_server\.py: error: |: error: (?:unrecognized arguments|argument )"
                              r"|invalid choice:", "invalid engine argument"),
]
# Flags the launcher sets itself or that only name things.
_NOT_CHECKED = {"host", "port", "model-path", "served-model-name", "api-key"}
# SGLang flags whose ServerArgs field is named otherwise; the rest are the flag with underscores.
_FIELD = {"tp": "tp_size", "tensor-parallel-size": "tp_size", "dp": "dp_size", "data-parallel-size": "dp_size",
          "pp": "pp_size", "pipeline-parallel-size": "pp_size", "ep": "ep_size", "expert-parallel-size": "ep_size",
          "model": "model_path"}


def log_message(line: str) -> tuple[str | None, str]:
    """(level, message) of a log line; a line of another shape is its own message."""
    m = _LINE.match(line.rstrip())
    return (m["level"], m["msg"]) if m else (None, line.rstrip())


def parse_server_args(body: str) -> dict[str, Any]:
    """The fields of a `ServerArgs(...)` repr; a value that is no Python literal (an enum's repr)
    is kept as its text."""
    try:
        call = ast.parse(f"f({body})", mode="eval").body
    except SyntaxError:
        return {}
    out: dict[str, Any] = {}
    for kw in call.keywords if isinstance(call, ast.Call) else []:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError):
            out[kw.arg] = ast.unparse(kw.value)
    return out


def parse_sglang_boot(text: str) -> BootFacts:
    """Facts from an SGLang server's log. Where several ranks repeat a line the last one wins."""
    facts = BootFacts(engine="sglang")
    seen: set[str] = set()
    for raw in text.splitlines():
        level, msg = log_message(raw)
        if level == "WARNING" and msg not in seen:
            seen.add(msg)
            facts.warnings.append(msg)
        _scan(facts, msg, raw.rstrip())
    return facts


def _scan(f: BootFacts, msg: str, line: str) -> None:
    def found(name: str) -> None:
        f.evidence[name] = line

    if m := _SERVER_ARGS.search(msg):
        f.resolved_args = parse_server_args(m["body"])
        found("resolved_args")
        backend = f.resolved_args.get("attention_backend")
        if isinstance(backend, str):
            f.attention_backend = backend
        if isinstance(f.resolved_args.get("context_length"), int):
            f.max_model_len = f.resolved_args["context_length"]
    elif m := _KV_ALLOCATED.search(msg):
        f.kv_cache_tokens = int(m["tokens"])
        f.kv_cache_memory_gib = float(m["k"]) + float(m["v"])  # SGLang's "GB" are 2**30 bytes
        found("kv_cache_memory_gib")
    elif m := _POOL_END.search(msg):
        f.memory_pool_free_gib = float(m["free"])
        found("memory_pool_free_gib")
    elif m := _GRAPH_BS.search(msg):
        f.cuda_graph_batch_sizes = [int(x) for x in ast.literal_eval(m["bs"])]
        found("cuda_graph_batch_sizes")
    elif m := _GRAPH_END.search(msg):
        f.cuda_graph_seconds = float(m["s"])
        if m["gib"] is not None:
            f.cuda_graph_gib = float(m["gib"])
        found("cuda_graph_seconds")
    elif m := _LOAD_END.search(msg):
        f.model_load_gib = float(m["gib"])
        found("model_load_gib")
    elif m := _SCHEDULER.search(msg):
        f.kv_cache_tokens = int(m["tokens"])
        fields = {x["k"]: int(x["v"]) for x in _SCHEDULER_FIELD.finditer(m["rest"])}
        f.max_num_batched_tokens = fields.get("chunked_prefill_size", f.max_num_batched_tokens)
        f.max_running_requests = fields.get("max_running_requests", f.max_running_requests)
        f.max_model_len = fields.get("context_len", f.max_model_len)
        found("kv_cache_tokens")


def server_args_field(flag: str) -> str:
    flag = normalize_flag_name(flag)
    return _FIELD.get(flag, flag.replace("-", "_"))


def check_sglang_applied(config: Config, facts: BootFacts) -> list[AppliedMismatch]:
    """Every requested flag whose ServerArgs field shows another value, or that the line lacks.
    A boot whose log has no ServerArgs line proves nothing and contradicts nothing."""
    if not facts.resolved_args:
        return []
    line = facts.evidence.get("resolved_args")
    out: list[AppliedMismatch] = []
    for name, requested in config.flags.items():
        flag = normalize_flag_name(name)
        if requested is None or flag in _NOT_CHECKED:
            continue
        key = server_args_field(flag)
        if key not in facts.resolved_args:
            out.append(AppliedMismatch(flag=flag, requested=requested, applied=None, evidence_line=None,
                                       reason=f"SGLang's server_args line has no field {key!r}"))
            continue
        applied = facts.resolved_args[key]
        if not _same(requested, applied):
            out.append(AppliedMismatch(flag=flag, requested=requested, applied=applied, evidence_line=line,
                                       reason=f"SGLang resolved {key}={applied!r}"))
    return out


def _same(requested: FlagValue, applied: Any) -> bool:
    if isinstance(requested, bool) or isinstance(applied, bool):
        return bool(requested) == bool(applied)
    return same_value(requested, applied)


def classify_sglang_failure(log_tail: str, exit_code: int | None) -> Failure:
    """Why an SGLang server did not come up (or went down)."""
    return failure_from_rules(_RULES, log_tail, exit_code)
