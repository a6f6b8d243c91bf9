"""`trace:` of a scenario: which recorded requests a Run replays, and how fast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from .formats import TraceFormat

MOONCAKE_BLOCK_TOKENS = 512
# The key under which a Python dump (`model_dump()`) carries the study file's folder, so that the
# scenario re-validated from it (`Scenario.model_validate({**sc.model_dump(), ...})`) still reads
# a relative `path` from there. Only a Path is taken there (no study file, YAML or JSON, makes one),
# and a JSON dump (the stored spec, a run's result) leaves it out: the path stays as written.
FOLDER_KEY = "_base_dir"


class TraceSpec(BaseModel):
    """A window (`start_s`, `duration_s`, in the trace's seconds from its first row) or a sample of
    a trace, replayed at its recorded arrival times divided by `speedup` (2: twice as fast)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="the trace file (a study's relative path is from the study file)")
    format: TraceFormat = Field(default="auto", description="mooncake, azure, burstgpt, servetune, or auto (detected)")
    speedup: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                           description="replay this many times as fast as recorded (2: in half the time)")
    start_s: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                           description="the window's start, seconds into the recording")
    duration_s: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                     description="the window's length in recorded seconds (none: to the end)")
    sample: float = Field(default=1.0, gt=0, le=1, description="share of requests (whole sessions) kept")
    max_requests: int | None = Field(default=None, ge=1, description="the window's first N requests")
    seed: int = Field(default=0, description="which requests a sample keeps")
    # The tokens one hash id stands for (Mooncake's traces: 512). `token_scale` shrinks or grows every
    # length and the block alike, so the prefix structure survives on a model of a shorter context.
    block_size: int = Field(default=MOONCAKE_BLOCK_TOKENS, ge=1, description="tokens one hash id stands for")
    token_scale: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                               description="every length (and block) multiplied by this, to fit a smaller server")
    # The server's KV block (vLLM: --block-size): a prefix cache hits whole blocks of it.
    cache_block_size: int = Field(default=16, ge=1,
                                  description="the server's KV block (vLLM --block-size), for the implied hit rate")

    # A study's loader passes its file's folder (validation context "base_dir"): a relative `path`
    # is read from there, and stays as written so that the study's identity does not depend on
    # where the study is checked out. A copy keeps it: `model_copy` as any private attribute, a
    # Python dump and its re-validation through FOLDER_KEY.
    _base_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _carry_folder(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> TraceSpec:
        """A Python dump's folder (FOLDER_KEY) back on the re-validated spec."""
        folder = data.get(FOLDER_KEY) if isinstance(data, dict) else None
        if isinstance(folder, Path):
            data = {k: v for k, v in data.items() if k != FOLDER_KEY}
        spec: TraceSpec = handler(data)
        if isinstance(folder, Path):
            spec._base_dir = folder
        return spec

    @model_serializer(mode="wrap")
    def _dump_folder(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self._base_dir is not None and not info.mode_is_json():
            data[FOLDER_KEY] = self._base_dir
        return data

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> TraceSpec:
        base_dir = (info.context or {}).get("base_dir")
        if base_dir is not None:
            self._base_dir = Path(base_dir)
        scaled = self.block_size * self.token_scale
        if abs(scaled - round(scaled)) > 1e-9 or round(scaled) < 1:
            raise ValueError(f"block_size x token_scale must be a whole number of tokens, got {scaled:g}")
        return self

    @property
    def file(self) -> Path:
        """The file to read: `path`, from the study file's folder when it is relative."""
        if self.path.is_absolute() or self._base_dir is None:
            return self.path
        return self._base_dir / self.path

    @property
    def block_tokens(self) -> int:
        """Tokens of one hash block as replayed."""
        return round(self.block_size * self.token_scale)
