"""A Scenario: the traffic one Run sends to a server."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .trace.spec import TraceSpec
from .trace.window import load_replay


class Fixed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1)


class Uniform(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["uniform"] = "uniform"
    low: int = Field(ge=1)
    high: int = Field(ge=1)


class Normal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["normal"] = "normal"
    mean: float = Field(gt=0)
    std: float = Field(ge=0)


class FromFile(BaseModel):
    """One integer per line."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["file"] = "file"
    path: Path


LengthDist = Annotated[Fixed | Uniform | Normal | FromFile, Field(discriminator="kind")]
Length = int | LengthDist


class SharedPrefix(BaseModel):
    """A common prefix (system prompt, tool schemas) that `share` of requests start with."""

    model_config = ConfigDict(extra="forbid")
    length: int = Field(ge=1, description="prefix tokens, counted inside input_len")
    share: float = Field(default=1.0, ge=0.0, le=1.0)


def _checked_length(value: Length) -> Length:
    if isinstance(value, int) and value < 1:
        raise ValueError(f"must be at least 1 token, got {value}")
    if isinstance(value, Uniform) and value.low > value.high:
        raise ValueError(f"low ({value.low}) is above high ({value.high})")
    return value


class TrafficClass(BaseModel):
    """One kind of request in a mixed scenario (chat beside long documents): its lengths and its
    part of the traffic, a `share` of the scenario's requests or a `rate` of its own (req/s)."""

    model_config = ConfigDict(extra="forbid")
    input_len: Length = 512
    output_len: Length = 512
    share: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_part(self) -> TrafficClass:
        if (self.share is None) == (self.rate is None):
            raise ValueError("give share (of the scenario's requests) or rate (req/s), not both or neither")
        return self


class Scenario(BaseModel):
    """Input/output lengths, arrival process, request count, warmups, seed."""

    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    input_len: Length = 512
    output_len: Length = 512
    # Arrival: closed loop at `concurrency`; open loop at `rate` (req/s, Poisson when
    # burstiness == 1, gamma otherwise), capped by `concurrency` if both are set;
    # `rate: inf` sends everything at once.
    concurrency: int | None = Field(default=1, ge=1)
    rate: float | None = Field(default=None, gt=0)
    burstiness: float = Field(default=1.0, gt=0)
    num_prompts: int | None = Field(default=20, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmups: int | None = Field(default=None, ge=0, description="default: max(concurrency, 1)")
    seed: int = 0
    ignore_eos: bool = True
    # Sampling temperature sent with each request (None: the server's default). 0 is greedy, the
    # usual setting when speculative decoding's acceptance is compared.
    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    shared_prefix: SharedPrefix | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    dataset: Path | None = Field(default=None, description="JSONL of {prompt} or {input_len, output_len}")
    # A recorded trace replayed at its arrival times (load/trace/): it sets the requests, their
    # lengths, prefixes and times; num_prompts (when given) keeps its first N, concurrency caps it.
    trace: TraceSpec | None = None
    # Traffic classes sent side by side in one run (load/classes.py): each sets its own lengths (the
    # scenario's input_len and output_len are not used) and each request carries its class, so each
    # class's latencies are measured and judged apart. Shares are the parts of num_prompts; rates
    # are each class's own arrivals, their sum the scenario's rate.
    classes: dict[str, TrafficClass] | None = None
    # One request per prompt size, in order (the prefill sweep).
    sweep_input_lens: list[int] | None = None
    # The sweep's limit per size: a size with no first token within it is recorded as timed out
    # and the sweep goes on with the next (the stall timeout of a sweep's requests).
    sweep_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # A stream that sends nothing for stall_timeout_s is a failed request ("stalled"); a run
    # still going after run_timeout_s is ended. Default: derived from the traffic (below).
    stall_timeout_s: float | None = Field(default=None, gt=0)
    run_timeout_s: float | None = Field(default=None, gt=0)

    @field_validator("input_len", "output_len")
    @classmethod
    def _positive_length(cls, value: Length) -> Length:
        return _checked_length(value)

    @field_validator("classes")
    @classmethod
    def _classes(cls, classes: dict[str, TrafficClass] | None) -> dict[str, TrafficClass] | None:
        if classes is None:
            return None
        if len(classes) < 2:
            raise ValueError("a mixed scenario needs two or more classes")
        for name, tc in classes.items():
            if not name or not name.replace("-", "_").isidentifier():
                raise ValueError(f"class name {name!r}: use letters, digits, '_' or '-'")
            for key in ("input_len", "output_len"):
                try:
                    _checked_length(getattr(tc, key))
                except ValueError as exc:
                    raise ValueError(f"{name}.{key}: {exc}") from None
        by_share = [n for n, tc in classes.items() if tc.share is not None]
        if by_share and len(by_share) != len(classes):
            raise ValueError(f"give every class a share or every class a rate, not some of each "
                             f"(a share: {', '.join(by_share)})")
        return classes

    @field_validator("sweep_input_lens")
    @classmethod
    def _positive_sweep(cls, lens: list[int] | None) -> list[int] | None:
        if lens is not None and (not lens or min(lens) < 1):
            raise ValueError("needs one or more prompt sizes, each at least 1 token")
        return lens

    @field_validator("burstiness", "duration_s")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        # `rate: inf` means all at once; an infinite duration or burstiness means a run that never ends.
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.trace is not None:
            return self._check_trace()
        if self.classes is not None:
            self._check_classes()
        if self.num_prompts is None and self.duration_s is None and not self.sweep_input_lens:
            raise ValueError("set num_prompts or duration_s")
        if self.concurrency is None and self.rate is None:
            raise ValueError("set concurrency (closed loop) or rate (open loop)")
        return self

    def _check_trace(self) -> Scenario:
        clashing = [k for k in ("rate", "dataset", "sweep_input_lens", "shared_prefix", "duration_s", "classes")
                    if getattr(self, k) is not None]
        if clashing:
            raise ValueError(f"trace sets the requests and their times: drop {', '.join(clashing)}")
        # Unless set, a replay sends the whole window and does not cap what is in flight.
        if "num_prompts" not in self.model_fields_set:
            self.num_prompts = None
        if "concurrency" not in self.model_fields_set:
            self.concurrency = None
        return self

    def _check_classes(self) -> None:
        clashing = [k for k in ("dataset", "sweep_input_lens") if getattr(self, k) is not None]
        if clashing:
            raise ValueError(f"classes set the requests' lengths: drop {', '.join(clashing)}")
        assert self.classes is not None
        rates = [tc.rate for tc in self.classes.values() if tc.rate is not None]
        if not rates:
            return
        total = math.fsum(rates)
        if self.rate is not None and not math.isclose(self.rate, total, rel_tol=1e-9):
            raise ValueError(f"rate ({self.rate:g}) differs from the sum of the classes' rates ({total:g}); "
                             "drop rate (it is that sum)")
        self.rate = total
        # Each class arrives on its own: no cap on what is in flight unless one is given.
        if "concurrency" not in self.model_fields_set:
            self.concurrency = None

    @property
    def effective_warmups(self) -> int:
        if self.warmups is not None:
            return self.warmups
        return max(self.concurrency or 1, 1)

    @property
    def effective_stall_timeout_s(self) -> float:
        """The longest silence of a healthy server is the wait for a first token: queueing plus
        the prefill of the longest prompt, at a pessimistic pace (a large model on a CPU)."""
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        if self.sweep_input_lens and self.sweep_timeout_s is not None:
            return self.sweep_timeout_s
        return _STALL_BASE_S + self._upper_lens()[0] / _PREFILL_FLOOR_TOK_S

    @property
    def effective_run_timeout_s(self) -> float:
        """A bound a healthy run does not reach: every request (warmups included) in waves of
        `concurrency` slots, each prefilled and decoded at the floor pace, after the arrivals."""
        if self.run_timeout_s is not None:
            return self.run_timeout_s
        n = self.effective_warmups + (len(self.sweep_input_lens) if self.sweep_input_lens else self.num_prompts or 0)
        slots = self.concurrency or _UNCAPPED_SLOTS
        input_len, output_len = self._upper_lens()
        per_request = input_len / _PREFILL_FLOOR_TOK_S + output_len / _DECODE_FLOOR_TOK_S
        arrivals = n / self.rate if self.rate and math.isfinite(self.rate) else 0.0
        if self.trace is not None:
            replay = load_replay(self.trace)
            n += len(replay.requests)
            arrivals = replay.span_s / self.trace.speedup
        waves = math.ceil(n / slots) + 1  # + 1: the requests still in flight when a duration ends
        if self.sweep_input_lens and self.sweep_timeout_s is not None:  # each size ends by its limit
            per_request = min(per_request, self.sweep_timeout_s + output_len / _DECODE_FLOOR_TOK_S)
        return _RUN_BASE_S + (self.duration_s or 0.0) + arrivals + waves * per_request

    def _upper_lens(self) -> tuple[float, float]:
        """The largest input and output lengths this scenario sends."""
        if self.dataset is not None:
            return _UNKNOWN_LEN, _UNKNOWN_LEN
        if self.trace is not None:
            requests = load_replay(self.trace).requests
            return max(r.input_len for r in requests), max(r.output_len for r in requests)
        if self.classes is not None:
            return (max(_upper(tc.input_len) for tc in self.classes.values()),
                    max(_upper(tc.output_len) for tc in self.classes.values()))
        inputs = max(self.sweep_input_lens) if self.sweep_input_lens else _upper(self.input_len)
        return inputs, _upper(self.output_len)


# Floors for the derived limits: slower than any server worth tuning, so only a broken one
# reaches them (the stall timeout is what ends a server that stops sending); both overridable.
_STALL_BASE_S = 300.0
_PREFILL_FLOOR_TOK_S = 50.0
_DECODE_FLOOR_TOK_S = 2.0
_RUN_BASE_S = 120.0
_UNCAPPED_SLOTS = 8          # an open loop without a cap: assume the server batches at least this many
_UNKNOWN_LEN = 8192          # lengths read from a file, not known before the run


def _upper(length: Length) -> float:
    """The largest length a distribution gives (mean + 4 sd for a normal one)."""
    if isinstance(length, int):
        return length
    if isinstance(length, Fixed):
        return length.value
    if isinstance(length, Uniform):
        return max(length.low, length.high)
    if isinstance(length, Normal):
        return length.mean + 4 * length.std
    return _UNKNOWN_LEN


PRESETS: dict[str, Scenario] = {
    "single-decode": Scenario(name="single-decode", input_len=512, output_len=512, concurrency=1, num_prompts=20),
    "prefill-heavy": Scenario(name="prefill-heavy", input_len=8192, output_len=256, concurrency=4, num_prompts=16),
    "contention": Scenario(name="contention", input_len=2048, output_len=512, concurrency=16, num_prompts=64),
    "chat": Scenario(name="chat", input_len=2048, output_len=256, concurrency=2, num_prompts=20, endpoint="chat"),
    # Chat users arriving on their own (an open loop) and in bursts: gamma gaps of shape 0.5, whose
    # coefficient of variation is sqrt(2), against Poisson's 1. The rate is what a capacity search varies.
    "chat-bursty": Scenario(name="chat-bursty", input_len=2048, output_len=256, concurrency=None, rate=2.0,
                            burstiness=0.5, num_prompts=200, endpoint="chat"),
    "prefill-sweep": Scenario(
        name="prefill-sweep",
        input_len=4096,
        output_len=16,
        concurrency=1,
        num_prompts=None,
        warmups=1,
        sweep_input_lens=[4096, 8192, 12288, 16384, 24576, 32768, 49152],
        sweep_timeout_s=120,
    ),
}


def preset(name: str, **overrides: object) -> Scenario:
    """A built-in scenario with any field overridden."""
    if name not in PRESETS:
        raise KeyError(f"unknown scenario preset {name!r}; known: {', '.join(PRESETS)}")
    base = PRESETS[name].model_dump(exclude_unset=False)
    base.update({k: v for k, v in overrides.items() if v is not None})
    base.setdefault("name", name)
    return Scenario.model_validate(base)
