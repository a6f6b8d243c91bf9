"""A boot far from its config's other boots: the rule, on one config's per-boot values.

On the log scale (a ratio is symmetric there), with the median `m` of the config's boots and the
spread `s = max(1.4826 * MAD, sd of the other boots, FLOOR)`, boot `i` is far when
`|log x_i - m| > K * s`. 1.4826 * MAD estimates a normal sd without being moved by the outlier
itself; with few boots the MAD is erratic (of three boots it is the smaller of two gaps), so the
leave-one-out sd of the other boots bounds the spread from below, and FLOOR keeps a config whose
boots agree to the last digit from calling a 3 % boot far. At least MIN_BOOTS boots are needed:
with two, nothing says which one is off. docs/guides/statistics.md gives the rates this has
under boot noise alone and against a shifted boot (simulated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

K = 5.0
FLOOR = 0.02          # on the log scale: about 2 %
MIN_BOOTS = 4
MAD_TO_SD = 1.4826    # a normal distribution's sd per MAD


@dataclass(frozen=True)
class FarBoot:
    index: int        # position in the values given
    value: float      # the boot's value (not logged)
    median: float     # the median of all the config's boots (not logged)
    scale: float      # the spread s, log scale
    deviations: float  # |log x_i - m| / s


def far_boots(values: list[float], *, k: float = K, floor: float = FLOOR,
              min_boots: int = MIN_BOOTS) -> list[FarBoot]:
    """The boots of one config (per-boot means, positive) that lie more than `k` spreads from the
    median, farthest first; none for fewer than `min_boots` boots or non-positive values."""
    if len(values) < min_boots or not all(math.isfinite(v) and v > 0 for v in values):
        return []
    logs = np.log(np.asarray(values, dtype=float))
    median = float(np.median(logs))
    mad = float(np.median(np.abs(logs - median)))
    found = []
    for i, x in enumerate(logs):
        others = np.delete(logs, i)
        scale = max(MAD_TO_SD * mad, float(np.std(others, ddof=1)), floor)
        dev = abs(float(x) - median) / scale
        if dev > k:
            found.append(FarBoot(i, float(values[i]), math.exp(median), scale, dev))
    return sorted(found, key=lambda f: -f.deviations)
