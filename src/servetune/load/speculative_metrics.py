"""Speculative decoding's acceptance, from the /metrics counter deltas of a run (vLLM v1 names:
`vllm:spec_decode_num_drafts`, `_num_draft_tokens`, `_num_accepted_tokens`,
`_num_accepted_tokens_per_pos{position}`), computed as vLLM's own SpecDecodingProm documents:

- acceptance rate: accepted tokens / draft tokens;
- mean acceptance length: 1 + accepted tokens / drafts (the bonus token counted, as vLLM does);
- per-position acceptance: accepted at position k / drafts (falls with k; where it drops off says
  how many tokens are worth proposing).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Keys of RunResult.server_stats, as load.scrape names the counters' deltas.
DRAFTS = "spec_decode_drafts"
DRAFT_TOKENS = "spec_decode_draft_tokens"
ACCEPTED = "spec_decode_accepted_tokens"
ACCEPTED_AT = "spec_decode_accepted_tokens_pos"   # + the position: spec_decode_accepted_tokens_pos0, ...
# The derived values every run's record carries beside the deltas.
RATE = "spec_decode_acceptance_rate"
MEAN_LENGTH = "spec_decode_mean_acceptance_length"
RATE_AT = "spec_decode_acceptance_pos"            # + the position
_POSITION = re.compile(re.escape(ACCEPTED_AT) + r"(\d+)$")


def stat_number(stats: Mapping[str, Any], key: str) -> float | None:
    """A run's server stat as a finite number; None when it is missing, not a number or not finite."""
    value = stats.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class Acceptance:
    drafts: float
    draft_tokens: float
    accepted: float
    rate: float | None                # None: no draft token was proposed
    mean_length: float
    per_position: tuple[float, ...]   # acceptance at position 0, 1, ...

    @classmethod
    def of(cls, stats: Mapping[str, Any]) -> Acceptance | None:
        """None when the server reported no drafts (speculative decoding off, or nothing proposed)."""
        drafts, tokens, accepted = (stat_number(stats, k) for k in (DRAFTS, DRAFT_TOKENS, ACCEPTED))
        if not drafts or tokens is None or accepted is None:
            return None
        at = sorted((int(m.group(1)), v) for k in stats if (m := _POSITION.match(k))
                    and (v := stat_number(stats, k)) is not None)
        return cls(drafts=drafts, draft_tokens=tokens, accepted=accepted,
                   rate=accepted / tokens if tokens else None, mean_length=1.0 + accepted / drafts,
                   per_position=tuple(v / drafts for _, v in at))


def derived(stats: Mapping[str, Any]) -> dict[str, float]:
    """Acceptance rate, mean acceptance length and per-position acceptance as server_stats keys
    (nothing when the run made no drafts)."""
    acc = Acceptance.of(stats)
    if acc is None:
        return {}
    out = {MEAN_LENGTH: acc.mean_length, **{f"{RATE_AT}{k}": v for k, v in enumerate(acc.per_position)}}
    if acc.rate is not None:
        out[RATE] = acc.rate
    return out
