"""The regression protocol's shape: phases of short requests with one long request between them,
3 short -> one long -> 3 short -> one long -> 3 short by default (the field's repro of vLLM issue
#17140, where short-prompt decode fell 130 -> 90 -> 40 tok/s after each 24k-token request)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..load.scenario import Scenario


@dataclass(frozen=True)
class Phase:
    kind: Literal["short", "long"]
    after_long: int           # long requests sent before this phase
    index: int                # position in the protocol

    @property
    def name(self) -> str:
        return f"short-after-{self.after_long}" if self.kind == "short" else f"long-{self.after_long + 1}"


class DriftProtocol(BaseModel):
    """Lengths in tokens; every request streams with `ignore_eos`, so outputs are exactly as long."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    short_per_phase: int = Field(default=3, ge=2,
                                 description="short requests per phase (2+: each phase needs a spread)")
    long_requests: int = Field(default=2, ge=1, description="long requests, one between each two short phases")
    short_input_len: int = Field(default=256, ge=1)
    short_output_len: int = Field(default=64, ge=2, description="2+ tokens: TPOT needs a decode")
    long_input_len: int = Field(default=24_000, ge=1)
    long_output_len: int = Field(default=16, ge=1)
    warmups: int = Field(default=2, ge=0, description="short requests before the first phase, not measured")
    seed: int = 0
    # A phase's stream silent this long fails it as stalled (None: the Scenario's derived default).
    stall_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    def phases(self) -> list[Phase]:
        out: list[Phase] = []
        for k in range(self.long_requests + 1):
            out.append(Phase("short", k, len(out)))
            if k < self.long_requests:
                out.append(Phase("long", k, len(out)))
        return out

    def scenario(self, phase: Phase) -> Scenario:
        """One phase as a Scenario: its requests one after another (concurrency 1), so that each
        request meets the server as the previous one left it."""
        short = phase.kind == "short"
        return Scenario(
            name=phase.name, concurrency=1, endpoint="completions", ignore_eos=True,
            input_len=self.short_input_len if short else self.long_input_len,
            output_len=self.short_output_len if short else self.long_output_len,
            num_prompts=self.short_per_phase if short else 1,
            warmups=self.warmups if phase.index == 0 else 0,
            seed=self.seed + phase.index, stall_timeout_s=self.stall_timeout_s,
        )
