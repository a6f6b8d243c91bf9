"""`ofat`: one factor at a time, the field reports' method.

From the incumbent (at first the baseline), try every other value of the first parameter. Once
all are measured, the incumbent moves to the best of them only if it is feasible and beats the
incumbent significantly (Welch's test, Holm-corrected over that parameter's values, adjusted
p < alpha, positive effect); then the next parameter, from the possibly improved point. The walk
is replayed from the history on every call, so it needs no memory of its own. While a value of
the current parameter is still running on another slot, the walk cannot move on (the incumbent
may change): it proposes nothing until that trial ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.config import Config
from ..stats import compare_many, winners
from .base import Proposal, SearchBase, TrialView, Tried
from .registry import register_strategy


@register_strategy
class OneFactorAtATime(SearchBase):
    name = "ofat"
    enumerates = True

    def propose(self, history: Sequence[TrialView]) -> Proposal | None:
        return self.walk(history)[1]

    def incumbent(self, history: Sequence[TrialView]) -> dict[str, Any]:
        """The parameter values the walk has kept so far ({} while nothing beat the baseline)."""
        return self.walk(history)[0]

    def walk(self, history: Sequence[TrialView]) -> tuple[dict[str, Any], Proposal | None]:
        """Replay the walk over the history: the incumbent, and the next proposal (None at the end)."""
        tried = Tried.of(self.study, history)
        incumbent: dict[str, Any] = {}
        current = self.baseline
        for name in self.study.space:
            options = [{**incumbent, name: v} for v in self.values(name)]
            step = [(p, c) for p in options if (c := self.config(p)).key() != current.key() and self.allowed(c)]
            for params, config in step:
                if config not in tried:
                    reason = f"ofat: {name}={params[name]!r} from {current.label(self.baseline)}"
                    return incumbent, Proposal(params, reason=reason)
            if any(tried.running(c) for _, c in step) or tried.running(current):
                return incumbent, None  # the step is not measured yet: wait for it
            better = self._significantly_better(tried, current, step)
            if better is not None:
                incumbent, current = better
        return incumbent, None

    def _significantly_better(
        self, tried: Tried, current: Config, step: list[tuple[dict[str, Any], Config]]
    ) -> tuple[dict[str, Any], Config] | None:
        reference = tried.samples(current)
        usable = {c.key(): (p, c) for p, c in step if tried.usable(c)}
        if len(reference) < 2 or not usable:
            return None
        assessments = compare_many(
            reference,
            {key: tried.samples(c) for key, (_, c) in usable.items()},
            higher_is_better=True,
            alpha=self.study.alpha,
            min_effect_pct=self.study.min_effect_pct,
        )
        best = winners(assessments)
        return usable[best[0]] if best else None
