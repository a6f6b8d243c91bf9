"""Why a server did not come up (or went down): an Outcome from the log tail and the exit code.

`rule` and `failure_from_rules` are what every engine's failure classes are made of
(engine/sglang_log.py has SGLang's). vLLM's patterns are taken from real vLLM failures
(tests/fixtures/logs/). The first matching rule wins, so the more specific ones (context_too_long
quotes KV cache memory too) come first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel

from ..vocabulary import Outcome


class Failure(BaseModel):
    outcome: Outcome
    detail: str
    evidence: list[str]  # the log lines behind the verdict
    estimated_max_model_len: int | None = None  # context_too_long: vLLM's estimate of what fits
    free_memory_share: float | None = None  # oom at start-up: the device's free / total memory, the
    # highest --gpu-memory-utilization that could pass vLLM's check ("Free memory on device ...")


@dataclass(frozen=True)
class _Rule:
    outcome: Outcome
    pattern: re.Pattern[str]
    detail: str


_CONTEXT = re.compile(r"estimated maximum model length is (?P<n>\d+)")
# vLLM's start-up check (v1/worker/utils.py): "Free memory on device cuda:0 (22.76/24.0 GiB) on
# startup is less than desired GPU memory utilization (0.95, 22.8 GiB)".
_FREE_SHARE = re.compile(r"Free memory on device \S* ?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup")
_RULES = [
    _Rule(Outcome.port_in_use, re.compile(r"Address already in use|\[Errno 98\]"), "port already in use"),
    _Rule(Outcome.context_too_long, re.compile(
        r"estimated maximum model length is \d+|KV cache is needed, which is larger than the available KV cache memory"
        r"|larger than the maximum number of tokens that can be stored in KV cache"),
        "max model length does not fit in the KV cache"),
    _Rule(Outcome.oom, re.compile(
        r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks"
        r"|Insufficient memory|allocation is less than requested memory|Cannot allocate memory|\bMemoryError\b"
        r"|insufficient KV cache|is less than desired [GC]PU memory utilization", re.IGNORECASE),
        "out of memory"),
    _Rule(Outcome.invalid_arg, re.compile(
        r": error: (?:unrecognized arguments|argument |the following arguments are required)"
        r"|invalid choice:|validation errors? for \w+|pydantic_core\._pydantic_core\.ValidationError"),
        "invalid engine argument"),
]


def rule(outcome: Outcome, pattern: str, detail: str, flags: int = 0) -> _Rule:
    """A failure class: log lines matching `pattern` mean `outcome` (an engine's own words)."""
    return _Rule(outcome, re.compile(pattern, flags), detail)


def first_match(rules: list[_Rule], lines: list[str]) -> tuple[_Rule, list[str]] | None:
    """The first rule any line matches, with its lines (deduplicated, the last five)."""
    for r in rules:
        hits = [ln for ln in lines if r.pattern.search(ln)]
        if hits:
            return r, _dedupe(hits)[-5:]
    return None


def crash(lines: list[str], exit_code: int | None) -> Failure:
    """No rule matched: a crash, its error lines as evidence."""
    errors = [ln for ln in lines if re.search(r"(?:Error|Exception)\b", ln)]
    detail = f"server exited with code {exit_code}" if exit_code is not None else "server died"
    return Failure(outcome=Outcome.crashed, detail=detail, evidence=_dedupe(errors)[-5:])


def failure_from_rules(rules: list[_Rule], log_tail: str, exit_code: int | None) -> Failure:
    """An engine's failure classes applied to a log tail: the first matching rule, else a crash."""
    lines = log_tail.splitlines()
    found = first_match(rules, lines)
    if found is None:
        return crash(lines, exit_code)
    r, evidence = found
    return Failure(outcome=r.outcome, detail=f"{r.detail}: {_trim(evidence[-1])}", evidence=evidence)


def classify_failure(log_tail: str, exit_code: int | None) -> Failure:
    """Classify a vLLM server that exited before it became healthy (or died later)."""
    lines = log_tail.splitlines()
    found = first_match(_RULES, lines)
    if found is None:
        return crash(lines, exit_code)
    r, evidence = found
    hits = [ln for ln in lines if r.pattern.search(ln)]
    detail = f"{r.detail}: {_trim(evidence[-1])}"
    n = None
    if r.outcome is Outcome.context_too_long:
        m = next((m for ln in reversed(hits) if (m := _CONTEXT.search(ln))), None)
        if m:
            n = int(m["n"])
            detail = f"{r.detail}; vLLM estimates the maximum model length that fits is {n}"
    if r.outcome is Outcome.invalid_arg:
        evidence = _with_following(lines, evidence)
    share = None
    if r.outcome is Outcome.oom:
        free = next((m for ln in reversed(hits) if (m := _FREE_SHARE.search(ln))), None)
        if free is not None and float(free["total"]) > 0:
            share = float(free["free"]) / float(free["total"])
    return Failure(outcome=r.outcome, detail=detail, evidence=evidence, estimated_max_model_len=n,
                   free_memory_share=share)


def _with_following(lines: list[str], evidence: list[str]) -> list[str]:
    """pydantic prints the offending field on the lines after 'N validation error(s) for X'."""
    if not evidence or "validation error" not in evidence[-1]:
        return evidence
    i = len(lines) - 1 - lines[::-1].index(evidence[-1])
    return [*evidence, *lines[i + 1 : i + 9]]


def _dedupe(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(ln.strip() for ln in lines))


def _trim(line: str, width: int = 300) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


def tail(text: str, n: int = 80) -> str:
    return "\n".join(text.splitlines()[-n:])
