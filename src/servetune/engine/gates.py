"""Option values that run only on some GPUs or with some kernels installed.

An fp8 KV cache on an Ampere card, FlashMLA off Hopper, FlashInfer where the package is missing:
each costs a boot that fails (or runs something else than asked) before the study learns it. The
table below says what each needs; `servetune init` leaves such values out of the space it drafts
for the GPUs it finds, and `servetune plan` flags those a study file names anyway."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .hardware import Hardware

ATTENTION = ("attention-backend", "env.VLLM_ATTENTION_BACKEND")


@dataclass(frozen=True)
class Gate:
    names: tuple[str, ...]  # the flag (and the variable) that choose the value
    values: frozenset[str]  # the gated values, lower case
    what: str  # what the value is, for the message
    min_capability: tuple[int, int] | None = None
    module: str | None = None  # a Python package the engine's interpreter must have


GATES: tuple[Gate, ...] = (
    Gate(("kv-cache-dtype",), frozenset({"fp8", "fp8_e4m3", "fp8_e5m2"}),
         "an fp8 KV cache (native from Ada, Hopper, Blackwell)", min_capability=(8, 9)),
    Gate(("quantization",), frozenset({"fp8"}),
         "fp8 compute (older GPUs run fp8 weights only, through Marlin)", min_capability=(8, 9)),
    Gate(("quantization",), frozenset({"modelopt_fp4", "nvfp4"}), "FP4 tensor cores (Blackwell)",
         min_capability=(10, 0)),
    Gate(ATTENTION, frozenset({"flash_attn"}), "FlashAttention (Ampere and newer)", min_capability=(8, 0)),
    Gate(ATTENTION, frozenset({"flashmla"}), "FlashMLA (Hopper and newer)", min_capability=(9, 0)),
    Gate(ATTENTION, frozenset({"cutlass_mla"}), "CUTLASS MLA (Blackwell)", min_capability=(10, 0)),
    Gate(ATTENTION, frozenset({"flashinfer", "flashinfer_mla"}), "FlashInfer", module="flashinfer"),
    Gate(ATTENTION, frozenset({"xformers"}), "xFormers", module="xformers"),
)
KERNEL_MODULES = tuple(sorted({g.module for g in GATES if g.module is not None}))


def gate_for(name: str, value: Any) -> Gate | None:
    """The gate of `value` for the option `name`, None when it runs anywhere the engine does."""
    if not isinstance(value, str):
        return None
    return next((g for g in GATES if name in g.names and value.lower() in g.values), None)


def _version(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def why_not_here(name: str, value: Any, hardware: Hardware | None,
                 modules: Collection[str] | None = None) -> str | None:
    """Why `name: value` cannot run as meant on `hardware` with the engine's `modules` installed;
    None when it can, or when what it needs is not known (hardware or modules None)."""
    gate = gate_for(name, value)
    if gate is None:
        return None
    if gate.min_capability is not None and hardware is not None:
        need = f"{gate.what} needs compute capability {_version(gate.min_capability)} or newer"
        if not hardware.gpus:
            return f"{need}; no GPU here ({hardware.source})"
        caps = [g.compute_capability for g in hardware.gpus]
        if any(cc is None for cc in caps):
            return f"{need}; these GPUs do not report theirs"
        low = min(cc for cc in caps if cc is not None)
        if low < gate.min_capability:
            return f"{need}; these GPUs are {_version(low)}"
    if gate.module is not None and modules is not None and gate.module not in modules:
        return f"{gate.what} needs the Python package {gate.module!r}, which the engine's interpreter lacks"
    return None
