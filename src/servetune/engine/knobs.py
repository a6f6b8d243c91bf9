"""Applied-vs-requested for the knobs that are not flags: did each `env.*` variable take effect?

A flag shows up in vLLM's "non-default args"; a variable shows up nowhere unless the engine says
so, and a misspelled `VLLM_` name or one an upgrade removed is simply ignored. The evidence, from
the strongest:
1. vLLM's own warning "Unknown vLLM environment variable detected: NAME" (every VLLM_* variable
   it does not know, checked by its platform when it builds the engine config): not applied.
2. A line the study file declares for the knob (`evidence:`, a regex for the line that shows it
   applied or one that shows it did not) or a /metrics family it names.
3. A rule for a knob whose effect vLLM logs: the tuned MoE kernel-config folder ("Using
   configuration from FILE for MoE layer" vs "Using default MoE config"), the CPU build's
   VLLM_CPU_KVCACHE_SPACE ("Explicitly set (N/...) GiB for KV cache" vs "Auto set").
4. The value the server process resolved (`vllm.envs`), printed by servetune's vLLM plug-in
   (engine/vllm_plugin): it proves this vLLM reads the variable and parsed the value asked for,
   not that every code path uses it, so a rule's silence (a dense model and the MoE folder) wins.
Otherwise the knob is unproven: never "no effect".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..secrets import is_secret_name
from .applied import as_number, same_value
from .bootfacts import BootFacts, log_message
from .config import Config

ENV_KNOB = "env."


class KnobStatus(StrEnum):
    applied = "applied"
    not_applied = "not applied"
    unproven = "unproven"


class KnobEvidence(BaseModel):
    """One knob of a boot, as its evidence shows it."""

    knob: str  # "env.VLLM_CPU_KVCACHE_SPACE"
    requested: str
    status: KnobStatus
    evidence_line: str | None = None
    reason: str

    def describe(self) -> str:
        return f"{self.knob}={self.requested}: {self.status.value} ({self.reason})"


class DeclaredEvidence(BaseModel):
    """What a study file says shows a knob no rule knows: a boot-log line (a regex) that shows it
    took effect, one that shows it did not, or a /metrics family the server has only when it did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    log: str | None = Field(default=None, description="regex of a boot-log line that shows the knob took effect")
    unapplied_log: str | None = Field(default=None,
                                      description="regex of a boot-log line that shows the knob did not take effect")
    metric: str | None = Field(default=None, description="a /metrics family the healthy server has only when it did")

    @model_validator(mode="after")
    def _something(self) -> DeclaredEvidence:
        if self.log is None and self.unapplied_log is None and self.metric is None:
            raise ValueError("give log, unapplied_log or metric")
        for key in ("log", "unapplied_log"):
            pattern = getattr(self, key)
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"{key}: {pattern!r} is not a regular expression ({exc})") from None
        return self


@dataclass(frozen=True)
class _Rule:
    applied: re.Pattern[str]  # its `value` group: what the engine used
    not_applied: re.Pattern[str]
    same: Callable[[str, str], bool]  # (requested, used) -> does the line show the requested value?


def _file_in_folder(folder: str, file: str) -> bool:
    return Path(file).parent == Path(folder) or Path(file).parent.resolve() == Path(folder).resolve()


def _same_number(requested: str, used: str) -> bool:
    a, b = as_number(requested), as_number(used)
    return a is not None and b is not None and a == b


RULES: dict[str, _Rule] = {
    # vLLM 0.26-0.32 fused_moe.py / fp8_utils.py: a config file of the folder, else its own or the default
    "VLLM_TUNED_CONFIG_FOLDER": _Rule(
        re.compile(r"Using configuration from (?P<value>.+?) for (?:MoE layer|W8A8 Block FP8 kernel)"),
        re.compile(r"Using default MoE config"), _file_in_folder),
    # vLLM 0.32 CPU worker: the KV cache size it was given, else the one it chose
    "VLLM_CPU_KVCACHE_SPACE": _Rule(
        re.compile(r"Explicitly set \((?P<value>[\d.]+)/[\d.]+\) GiB for KV cache"),
        re.compile(r"Auto set \([\d.]+/[\d.]+\) GiB for KV cache"), _same_number),
}


def report_variables(config: Config) -> list[str]:
    """The variables whose resolved values the plug-in is asked to print: vLLM's own (VLLM_*),
    never one whose name says it holds a credential (its value would be printed in the log)."""
    return sorted(name for name in config.env if name.startswith("VLLM_") and not is_secret_name(name))


def evidence_source(var: str, declared: DeclaredEvidence | None, in_container: bool) -> str | None:
    """What can show `var` applied or not (for `plan`); None: nothing, its trials read unproven."""
    if declared is not None:
        return "the study's evidence"
    if var in RULES:
        return "a boot-log rule"
    if var.startswith("VLLM_"):
        return "vLLM's unknown-variable warning" + ("" if in_container else ", the value the server resolved")
    return None


def check_knobs(config: Config, log_text: str, facts: BootFacts,
                declared: dict[str, DeclaredEvidence] | None = None,
                metric_families: set[str] | None = None) -> list[KnobEvidence]:
    """Every `env.*` knob of `config` as the healthy boot's log (and /metrics, where the study
    names a family: `metric_families` is what the server had, None when not read) shows it."""
    declared = declared or {}
    messages = [(log_message(line), line.rstrip()) for line in log_text.splitlines()]
    return [_check(var, value, messages, facts, declared.get(f"{ENV_KNOB}{var}"), metric_families)
            for var, value in sorted(config.env.items())]


def _check(var: str, requested: str, messages: list[tuple[str, str]], facts: BootFacts,
           declared: DeclaredEvidence | None, metric_families: set[str] | None) -> KnobEvidence:
    def verdict(status: KnobStatus, reason: str, line: str | None = None) -> KnobEvidence:
        return KnobEvidence(knob=f"{ENV_KNOB}{var}", requested=requested, status=status, evidence_line=line,
                            reason=reason)

    version = f"vLLM {facts.engine_version}" if facts.engine_version else "this vLLM"
    if var in facts.unknown_env:
        return verdict(KnobStatus.not_applied, f"{version} does not know the variable: it warns "
                       "'Unknown vLLM environment variable detected'", facts.evidence.get(f"env.{var}"))
    resolved = facts.resolved_env
    if var in resolved and resolved[var] is None:
        return verdict(KnobStatus.not_applied, f"{version} does not know the variable (vllm.envs, read in the server)",
                       facts.evidence.get("resolved_env"))
    if declared is not None:
        found = _declared(declared, messages, metric_families)
        if found is not None:
            return verdict(*found)
    rule = RULES.get(var)
    if rule is not None:
        found = _by_rule(rule, requested, messages)
        if found is not None:
            return verdict(*found)
    if rule is None and resolved.get(var) is not None:
        value = str(resolved[var])
        line = facts.evidence.get("resolved_env")
        if _same_env_value(requested, value):
            return verdict(KnobStatus.applied, f"the server resolved it to {value} (vllm.envs)", line)
        return verdict(KnobStatus.not_applied, f"the server resolved it to {value}, not {requested} (vllm.envs)", line)
    return verdict(KnobStatus.unproven, _why_unproven(var, rule, declared))


def _declared(spec: DeclaredEvidence, messages: list[tuple[str, str]],
              families: set[str] | None) -> tuple[KnobStatus, str, str | None] | None:
    for pattern, status in ((spec.unapplied_log, KnobStatus.not_applied), (spec.log, KnobStatus.applied)):
        if pattern is None:
            continue
        regex = re.compile(pattern)
        line = next((full for msg, full in messages if regex.search(msg)), None)
        if line is not None:
            return status, f"the boot log has the study's evidence line /{pattern}/", line
    if spec.metric is not None and families is not None and spec.metric in families:
        return KnobStatus.applied, f"/metrics has {spec.metric} (the study's evidence)", None
    return None


def _by_rule(rule: _Rule, requested: str, messages: list[tuple[str, str]]) -> tuple[KnobStatus, str, str] | None:
    for msg, line in messages:
        if m := rule.applied.search(msg):
            used = m["value"]
            if rule.same(requested, used):
                return KnobStatus.applied, f"the engine used {used}", line
            return KnobStatus.not_applied, f"the engine used {used} instead", line
    for msg, line in messages:
        if rule.not_applied.search(msg):
            return KnobStatus.not_applied, "the engine logged its default instead", line
    return None


def _same_env_value(requested: str, resolved: str) -> bool:
    """vllm.envs turns "1"/"true" into True and numbers into numbers: compare what they mean."""
    switch = {"1": "true", "true": "true", "0": "false", "false": "false"}
    if resolved in ("True", "False"):
        return switch.get(requested.strip().lower()) == resolved.lower()
    return same_value(requested, resolved)


def _why_unproven(var: str, rule: _Rule | None, declared: DeclaredEvidence | None) -> str:
    if declared is not None:
        return "none of the study's evidence for it appeared"
    if rule is not None:
        return "the engine logged neither the line that shows it used nor its default"
    if var.startswith("VLLM_"):
        return ("this vLLM raised no unknown-variable warning for it, and the server did not report its value "
                "(servetune's vLLM plug-in did not run: a container, or VLLM_PLUGINS leaves it out)")
    return "no rule knows its evidence: declare it in the study file (evidence:)"


def unknown_variables(config: Config, facts: BootFacts | None) -> list[str]:
    """The Config's variables its boot shows the engine does not know (its warning, or the plug-in):
    whatever their values, the server runs as if they were unset."""
    if facts is None:
        return []
    return [var for var in sorted(config.env)
            if var in facts.unknown_env or (var in facts.resolved_env and facts.resolved_env[var] is None)]


def metric_families(text: str) -> set[str]:
    """The family and sample names of a /metrics page (a counter `x` also shows as `x_total`)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def unapplied(knobs: list[KnobEvidence]) -> list[KnobEvidence]:
    return [k for k in knobs if k.status is KnobStatus.not_applied]
