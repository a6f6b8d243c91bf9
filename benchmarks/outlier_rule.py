"""How often the far-boot rule (servetune.stats.outliers) excludes a boot of a config whose boots
differ by noise alone, and how often it finds a boot that a bad cache slowed, by the config's
boot count and the machine's boot-to-boot noise (log-normal). Prints a Markdown table; the
numbers in docs/guides/statistics.md come from `python benchmarks/outlier_rule.py`."""

from __future__ import annotations

import math

import numpy as np

from servetune.stats.outliers import far_boots

CONFIGS = 4000
BOOTS = (4, 5, 6, 8)
NOISE = (0.01, 0.05, 0.10, 0.30)   # boot-to-boot sd on the log scale
SLOWED = (0.75, 0.5, 1 / 7)          # the slowed boot's factor (1/7: the field report's poisoned cache)


def rate(rng: np.random.Generator, boots: int, sd: float, factor: float | None) -> float:
    hits = 0
    for _ in range(CONFIGS):
        values = np.exp(rng.normal(0.0, sd, boots))
        if factor is not None:
            values[-1] *= factor
        found = far_boots(list(values))
        hits += bool(found) if factor is None else any(f.index == boots - 1 for f in found)
    return hits / CONFIGS


def main() -> None:
    rng = np.random.default_rng(20261206)
    print("| boot sd | what | " + " | ".join(f"{n} boots" for n in BOOTS) + " |")
    print("| --- | --- |" + " --- |" * len(BOOTS))
    for sd in NOISE:
        rows = [("noise alone: a boot excluded", None)] + [(f"a boot at {f:.2g}x: found", f) for f in SLOWED]
        for what, factor in rows:
            cells = " | ".join(f"{100 * rate(rng, n, sd, factor):.1f} %" for n in BOOTS)
            print(f"| {100 * math.expm1(sd):.0f} % | {what} | {cells} |")


if __name__ == "__main__":
    main()
