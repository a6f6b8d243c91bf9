"""Where one slot's servers run on this host: their GPUs or CPUs.

A placement is part of a launch, not of a Config: two slots running the same Config run the same
engine config, so it stays out of `Config.key()` and is recorded on the trial instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ServetuneError
from .config import Config

# Flags whose product is the GPUs one server uses (each defaults to 1).
_GPU_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")


@dataclass(frozen=True)
class Placement:
    """Slot `slot`'s share of the host: variables its servers get and the CPUs they may use
    (None: wherever servetune itself may run). `where` says which machine that is when it is not
    the tuner's own (a Ray slot: node name and address, Ray's node id, the worker's pid); it is
    recorded with the trial so the report shows which node measured what."""

    slot: int = 0
    env: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] | None = None
    where: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, object]:
        """What the store and the report keep of it."""
        out: dict[str, object] = {"slot": self.slot, "env": dict(self.env),
                                  "cpus": list(self.cpus) if self.cpus else None}
        return {**out, **self.where}

    @classmethod
    def from_described(cls, described: Mapping[str, Any]) -> Placement:
        """The placement whose `describe()` this is (as the store keeps it)."""
        cpus = described.get("cpus")
        where = {k: str(v) for k, v in described.items() if k not in ("slot", "env", "cpus") and v is not None}
        return cls(int(described.get("slot") or 0), dict(described.get("env") or {}), tuple(cpus) if cpus else None,
                   where)

    @property
    def node(self) -> str | None:
        """The machine's name and address when it is not the tuner's own (a Ray slot's node)."""
        return self.where.get("node")

    def node_label(self) -> str:
        """Which machine: its name and address, and on Ray the node (several raylets may share a
        host; the id's head, as `ray status` lists it after `node_`). Empty for the tuner's host."""
        parts = [self.where["node"]] if "node" in self.where else []
        if "ray_node_id" in self.where:
            parts.append(f"Ray node {self.where['ray_node_id'][:8]}")
        return ", ".join(parts)

    def label(self) -> str:
        node = self.node_label()
        parts = [f"node {node}"] if node else []
        parts += [f"{k}={v}" for k, v in self.env.items() if k == "CUDA_VISIBLE_DEVICES"]
        if self.cpus:
            parts.append(f"cpus {','.join(map(str, self.cpus))}")
        return f"slot {self.slot}" + (f" ({'; '.join(parts)})" if parts else "")


def plan_placements(slots: int, gpus_per_trial: int, cpus: Sequence[int] | None = None,
                    bind_env: Sequence[str] = ()) -> list[Placement]:
    """One placement per slot. GPUs: slot i gets K*i .. K*i+K-1 of the visible ones. Without
    GPUs and with several slots, the host's CPUs are split into disjoint sets (a slot's server
    and its engine's busy process stay on its own cores, so the slots do not slow each other
    down), also named in each of `bind_env` (the study's engines' `EngineProfile.cpu_bind_env`).
    One slot without GPUs gets no placement: today's launch, unchanged."""
    if gpus_per_trial > 0:
        visible = _visible_gpus(slots * gpus_per_trial)
        return [Placement(i, {"CUDA_VISIBLE_DEVICES": ",".join(visible[i * gpus_per_trial:(i + 1) * gpus_per_trial])})
                for i in range(slots)]
    if slots == 1:
        return [Placement(0)]
    available = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if len(available) < slots:
        raise ServetuneError(f"parallel.slots: {slots} slots need at least {slots} CPUs, "
                             f"this process may use {len(available)}")
    share = len(available) // slots
    out = []
    for i in range(slots):
        mine = tuple(available[i * share:(i + 1) * share])
        # A CPU build that binds its OpenMP threads itself stays on the slot's cores when told them.
        out.append(Placement(i, {var: ",".join(map(str, mine)) for var in bind_env}, mine))
    return out


def _visible_gpus(needed: int) -> list[str]:
    """GPU ids this process may hand out: CUDA_VISIBLE_DEVICES when set (its entries are what a
    child must name), else 0..needed-1. Fewer than needed is an error, not a silent overlap."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in given.split(",") if x.strip()] if given else [str(i) for i in range(needed)]
    if len(ids) < needed:
        raise ServetuneError(f"parallel: {needed} GPUs needed (slots x gpus_per_trial), "
                             f"CUDA_VISIBLE_DEVICES names {len(ids)}")
    return ids


def server_gpus(config: Config) -> int:
    """GPUs one server of this config takes: tensor x pipeline x data parallel sizes."""
    out = 1
    for flag in _GPU_FLAGS:
        value = config.flags.get(flag)
        if isinstance(value, (int, str)) and str(value).isdigit():
            out *= int(value)
    return out
