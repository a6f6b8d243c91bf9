"""Resuming a search: the runs an earlier attempt measured are handed back to it in the order
they were measured, as long as it asks for their levels; then it measures on.

The search is a deterministic function of the samples it is given, so replaying them takes it
to where it stopped, and only what is missing is measured (a study's trial on a new boot, or
`servetune capacity --resume`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from .levels import LevelSample, Measure


class Replay:
    def __init__(self, stored: Iterable[LevelSample], measure: Measure) -> None:
        self.stored = deque(stored)
        self.fresh = measure
        self.replayed = 0

    def __call__(self, level: float, prior: list[LevelSample]) -> LevelSample:
        if self.stored and math.isclose(self.stored[0].level, level, rel_tol=1e-9):
            self.replayed += 1
            return self.stored.popleft()
        self.stored.clear()  # the search went elsewhere: what is left of the stored runs is not replayed
        return self.fresh(level, prior)
