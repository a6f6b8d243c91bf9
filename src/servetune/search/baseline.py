"""`baseline`: measure the given config only ("benchmark my current setup")."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Proposal, SearchBase, TrialView
from .registry import register_strategy


@register_strategy
class BaselineOnly(SearchBase):
    name = "baseline"

    def propose(self, history: Sequence[TrialView]) -> Proposal | None:
        return None  # the runner measures the baseline itself; there is no candidate
