"""`grid`: every combination of the Space's values that satisfies the constraints.

What a "restart" costs: vLLM cannot change its engine flags on a live server, so every config is
its own boot (weights load, KV-cache profiling, CUDA-graph capture / torch.compile; ~80 s for the
tiny CPU model, minutes on a GPU) whatever the order. The order decides how much changes from
one boot to the next: configs are visited in reflected mixed-radix Gray-code order, in which
consecutive combinations differ in exactly one parameter (where no constraint removes a
combination in between). Neighbouring boots then share most flags, so compile and graph caches
keyed on them stay valid, and a drift of the machine between two trials shows against a
one-flag change rather than a many-flag one. Naive nested-loop order changes several flags
every time an inner loop wraps around.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .base import Proposal, SearchBase, TrialView, Tried
from .registry import register_strategy


def gray_order(radices: Sequence[int], reverse: bool = False) -> Iterator[tuple[int, ...]]:
    """All index tuples of a mixed-radix grid, each differing from the previous in one digit."""
    if not radices:
        yield ()
        return
    first, rest = radices[0], radices[1:]
    digits = range(first - 1, -1, -1) if reverse else range(first)
    for d in digits:
        # The inner sequence runs forward for even digits and backward for odd ones;
        # reversing the whole sequence reverses each inner run too.
        for tail in gray_order(rest, reverse=(d % 2 == 1) != reverse):
            yield (d, *tail)


@register_strategy
class Grid(SearchBase):
    name = "grid"
    enumerates = True

    def combinations(self) -> Iterator[dict[str, Any]]:
        """Every combination of values, constraint-respecting or not, in Gray-code order."""
        names = list(self.study.space)
        values = [self.values(n) for n in names]
        for index in gray_order([len(v) for v in values]):
            yield {n: values[i][d] for i, (n, d) in enumerate(zip(names, index))}

    def propose(self, history: Sequence[TrialView]) -> Proposal | None:
        if not self.study.space:
            return None
        tried = Tried.of(self.study, history)
        for params, config in self.candidates(self.combinations(), tried):
            return Proposal(params, reason=f"grid: {config.label(self.baseline)}")
        return None
