"""The context oracle: the largest --max-model-len that fits the given memory settings.

The engine is asked first, in the order the field learnt to trust it (seeds 001, TUNING.md):
1. vLLM's automatic max-model-len (`--max-model-len -1`, vLLM >= 0.11): a boot that fits the
   length to the KV cache itself and logs it;
2. the "estimated maximum model length is N" of a boot at a length that does not fit;
3. "Maximum concurrency for X tokens per request: Y" of a boot that fits: about X·Y tokens fit.
Only where a boot fails without a number (an out-of-memory death, an older message) is the
length bisected. The answer is confirmed by a boot at exactly `--max-model-len N`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from ..engine.base import Engine, StartResult
from ..engine.config import Config
from ..errors import ServetuneError
from ..vocabulary import Outcome

AUTO = -1  # vLLM's "fit max-model-len to the KV cache" value
BLOCK = 16  # bisection steps are whole KV blocks (vLLM's smallest block size)


class ProbeBoot(BaseModel):
    """One boot of the probe: the length asked for and what the engine said."""

    requested: int  # -1: automatic
    outcome: str
    ran_at: int | None = None  # the length the server ran at (ok boots)
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    estimate: int | None = None  # context_too_long: vLLM's estimated maximum model length
    detail: str = ""
    log_path: str | None = None
    why: str = ""  # what chose this length: auto-fit, start, model maximum, estimate, concurrency,
    # bisection, confirm

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.ok

    @property
    def safe_length(self) -> int | None:
        """X·Y of "Maximum concurrency for X tokens per request: Y": the tokens one request may use."""
        if self.max_concurrency is None or not self.max_concurrency_tokens:
            return None
        return math.floor(self.max_concurrency * self.max_concurrency_tokens)


class ContextAnswer(BaseModel):
    max_model_len: int | None  # None: no length booted
    source: str  # how the length was found: a ProbeBoot.why, or none
    confirmed: bool  # a boot at exactly --max-model-len max_model_len was healthy
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # at max_model_len
    model_max: int | None = None
    boots: list[ProbeBoot] = Field(default_factory=list)
    reason: str = ""  # why there is no answer


# Boots a server at a length (AUTO = the engine's own fit), stops it, says what happened.
BootFn = Callable[[int], ProbeBoot]


def probe_boot(requested: int, result: StartResult) -> ProbeBoot:
    """A ProbeBoot from an engine's StartResult."""
    facts = result.boot_facts
    return ProbeBoot(requested=requested, outcome=str(result.outcome),
                     ran_at=facts.max_model_len if result.ok else None,
                     kv_cache_tokens=facts.kv_cache_tokens, max_concurrency=facts.max_concurrency,
                     max_concurrency_tokens=facts.max_concurrency_tokens,
                     estimate=result.estimated_max_model_len, detail=result.detail,
                     log_path=str(result.log_path) if result.log_path else None)


def model_max_len(model: str) -> int | None:
    """The model's own longest context (config.json), the most vLLM accepts without overrides;
    None for a model that is not a local directory or does not say."""
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def find_max_model_len(boot: BootFn, *, model_max: int | None, start: int | None = None,
                       tolerance: int = 256, max_boots: int = 10,
                       on_boot: Callable[[ProbeBoot], None] | None = None) -> ContextAnswer:
    """The largest max-model-len that boots. `start`: the first length to try (the field's
    "deliberately too high" probe); None tries the engine's automatic length first, then the
    model's maximum. Bisection stops when the fitting and failing lengths are `tolerance` apart.
    Every boot's `why` says which answer of the engine (or the bisection) chose its length."""
    boots: list[ProbeBoot] = []
    fits: ProbeBoot | None = None  # the longest healthy boot
    fits_why = ""  # how its length was found
    too_long: int | None = None  # the shortest length known not to fit
    candidate, why = (AUTO, "auto-fit") if start is None else (start, "start")

    while len(boots) < max_boots:
        b = boot(candidate).model_copy(update={"why": why})
        boots.append(b)
        if on_boot is not None:
            on_boot(b)
        if b.ok:
            ran = b.ran_at if b.ran_at is not None else (candidate if candidate > 0 else None)
            if ran is None:
                return _no_answer(boots, model_max, "the server booted but its log does not say its max model len")
            if fits is None or ran > (fits.ran_at or 0):
                fits, fits_why = b.model_copy(update={"ran_at": ran}), why
            if candidate == AUTO and (model_max is None or ran < model_max):
                too_long = ran + 1  # the engine fitted the length itself: nothing longer fits
            # The engine's headroom answer: about X·Y tokens fit one request.
            limits = [x for x in (b.safe_length, model_max, None if too_long is None else too_long - 1)
                      if x is not None]
            if b.safe_length is not None and min(limits) > ran + tolerance:
                candidate, why = min(limits), "concurrency"
                continue
            if candidate != ran:
                candidate, why = ran, "confirm"  # an automatic length: boot it as the user will
                continue
            if too_long is not None and too_long - ran > tolerance:
                candidate, why = _midpoint(ran, too_long), "bisection"
                continue
            break
        if candidate == AUTO:
            # No automatic length in this version (or it could not fit): ask at the model's maximum.
            if model_max is None:
                return _no_answer(boots, model_max, f"the automatic max-model-len failed ({b.outcome}: {b.detail}) "
                                  "and the model's maximum length is unknown: give --start")
            candidate, why = model_max, "model maximum"
            continue
        if b.outcome not in (Outcome.context_too_long, Outcome.oom):
            return _no_answer(boots, model_max, f"the boot at max-model-len {candidate} failed as {b.outcome}, "
                              f"which a shorter length does not cure: {b.detail}")
        too_long = candidate if too_long is None else min(too_long, candidate)
        low = fits.ran_at if fits is not None and fits.ran_at is not None else 0
        if b.estimate is not None and low < b.estimate < too_long:
            # The engine's word: nothing longer fits, so no bisection above it once it boots.
            candidate, why, too_long = b.estimate, "estimate", b.estimate + 1
            continue
        if too_long - low <= tolerance:
            break
        candidate, why = _midpoint(low, too_long), "bisection"
    if fits is None or fits.ran_at is None:
        return _no_answer(boots, model_max, "no length booted within the boot budget")
    confirmed = any(b.ok and b.requested == fits.ran_at for b in boots)
    return ContextAnswer(max_model_len=fits.ran_at, source=fits_why, confirmed=confirmed,
                         kv_cache_tokens=fits.kv_cache_tokens, max_concurrency=fits.max_concurrency,
                         model_max=model_max, boots=boots)


def _midpoint(low: int, high: int) -> int:
    """Halfway, on a whole block where that stays above `low` (a length already known)."""
    mid = (low + high) // 2
    rounded = mid - mid % BLOCK
    return rounded if rounded > low else max(mid, low + 1)


def _no_answer(boots: list[ProbeBoot], model_max: int | None, reason: str) -> ContextAnswer:
    return ContextAnswer(max_model_len=None, source="none", confirmed=False, model_max=model_max, boots=boots,
                         reason=reason)


def check_start(start: int | None) -> None:
    if start is not None and start < 1:
        raise ServetuneError(f"--start {start}: a max-model-len is at least 1 token")


def engine_boot(engine: Engine, config: Config, log_dir: Path) -> BootFn:
    """A BootFn that starts `engine` with `config` at a max-model-len and stops it at once."""
    count = 0

    def boot(length: int) -> ProbeBoot:
        nonlocal count
        count += 1
        name = "auto" if length == AUTO else str(length)
        result = engine.start(config.merged(Config.of({"max-model-len": length})),
                              log_dir / f"probe-context-{count:02d}-{name}.log")
        if result.server is not None:
            engine.stop(result.server)
        return probe_boot(length, result)

    return boot
