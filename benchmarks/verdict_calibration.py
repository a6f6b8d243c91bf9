"""Calibration and power of the finalist verdict, through the whole pipeline, with racing and short screening.

Every simulated study screens m candidates on one boot each, picks up to k finalists (the best by
their screening estimate that beat the baseline's), re-validates them on fresh boots paired with
baseline boots, optionally boots the leader and the baseline again until decided, and names a
winner when a finalist's T reaches the critical value servetune computes for that design
(stats/pipeline.py): with replicates at the least favourable replicate/boot sd ratio, 0, as
analysis/verdict_rule.py does (the table of critical values by ratio below shows it is the largest). The A/A calibration (scripts/aa_calibration.py) never selects a
finalist, so it cannot see the selection's inflation; this does.

False winners: every candidate as good as the baseline (or worse), any winner is false; the
Clopper-Pearson 95 % upper bound must stay <= 5.5 % in every cell. Power: boot sd 6 %, one
candidate truly better, how often it is named winner.

Racing and short screening (tune/racing.py, analysis/screening.py): a screening candidate stops after
a replicate once its interval at the racing confidence lies below the baseline by the minimum
effect (1 %, over the boot sd of 6 %), and is no finalist; the search's boots run a fraction of the
prompts, so their replicate sd is the full run's over sqrt(fraction). The rule's critical value is
the one servetune uses (ratio 0, racing and fraction not in it); every such cell must meet the
same bound. The simulated race knows the variances (a normal interval), so it stops more often
than the study's t interval on a few boot-level df does; racing at 0.8 shows the rate does not
hang on how eagerly candidates are stopped.

    python benchmarks/verdict_calibration.py [--studies 20000] [--jobs 8] [--out docs/results]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps
from scipy.special import ndtri

from servetune.stats.pipeline import Design, Race, critical_level, simulate

ALPHA = 0.05
BOUND = 0.055
BOOT_SD = 0.06   # the H200 chat capacity's boot sd, on the log scale
MIN_EFFECT = 0.01   # the study file's default min_effect_pct, as a ratio


@dataclass(frozen=True)
class Cell:
    kind: str                 # null | worse | power
    m: int
    k: int
    boots: int                # boots a side in the fixed re-validation (screening boot included)
    max_boots: int            # the leader's cap (re-validation until decided); = boots: none
    reps: int
    sd_ratio: float
    effect_pct: float = 0.0   # power: the one better candidate's true effect
    worse_pct: float = 0.0    # worse: the other candidates' true effect (negative)
    fraction: float = 1.0     # screening runs' share of the prompts (1: as long as the finalists')
    racing: float = 0.0       # racing's two-sided confidence (0: off)


def cells() -> list[Cell]:
    out = [Cell("null", m, k, b, b, r, ratio)
           for m in (1, 2, 5, 8, 20) for k in (1, 2) for b in (2, 3) for r in (1, 3)
           for ratio in ((0.0,) if r == 1 else (0.0, 1.0, 10.0))]
    out += [Cell("null", m, 2, 2, cap, r, 1.0 if r > 1 else 0.0) for m in (5, 20) for cap in (3, 5) for r in (1, 3)]
    out += [Cell("worse", 5, 2, 2, cap, 1, 0.0, worse_pct=w) for cap in (2, 5) for w in (-3.0, -10.0, -40.0)]
    out += [Cell("power", 5, k, b, cap, 1, 0.0, effect_pct=e)
            for e in (10.0, 20.0, 40.0) for k in (1, 2) for b, cap in ((2, 2), (3, 3), (2, 5))]
    return out + design_cells()


SCREENING = ((1.0, 0.99), (1.0, 0.8), (0.5, 0.0), (0.5, 0.99), (0.5, 0.8), (0.25, 0.0), (0.25, 0.99), (0.25, 0.8))


def design_cells() -> list[Cell]:
    """The racing and short-screening design: every (fraction, racing) pair on the pipeline's shapes.
    With one replicate racing has nothing left to stop and a fraction only makes the run noisier;
    at ratio 0 the replicates carry no noise and a fraction changes nothing, so those pairs are left out."""
    out = []
    for m in (5, 20):
        for k in (1, 2):
            for b, cap in ((2, 2), (2, 5)):
                for reps, ratio in ((1, 1.0), (3, 0.0), (3, 1.0), (3, 10.0)):
                    for fraction, racing in SCREENING:
                        if (reps == 1 and racing) or (ratio == 0.0 and fraction < 1.0):
                            continue
                        out.append(Cell("null", m, k, b, cap, reps, ratio, fraction=fraction, racing=racing))
    out += [Cell("worse", 5, 2, 2, cap, 3, 1.0, worse_pct=w, fraction=0.5, racing=0.99)
            for cap in (2, 5) for w in (-3.0, -10.0, -40.0)]
    out += [Cell("power", 5, 2, 2, 5, 3, 1.0, effect_pct=e, fraction=fraction, racing=racing)
            for e in (10.0, 20.0) for fraction, racing in ((1.0, 0.0), (1.0, 0.99), (0.5, 0.0), (0.5, 0.99))]
    return out


def _design(cell: Cell, ratio: float) -> Design:
    return Design(screened=cell.m, finalists=cell.k, baseline_screen_boots=1, fresh_boots=cell.boots - 1,
                  extra_looks=cell.max_boots - cell.boots, replicates=cell.reps, sd_ratio=ratio)


def run_cell(args: tuple[Cell, int, int]) -> dict[str, Any]:
    cell, studies, seed = args
    started = time.perf_counter()
    effects = np.zeros(cell.m)
    if cell.kind == "worse":
        effects[1:] = math.log1p(cell.worse_pct / 100.0) / BOOT_SD
    if cell.kind == "power":
        effects[0] = math.log1p(cell.effect_pct / 100.0) / BOOT_SD
    sequential = cell.max_boots > cell.boots
    rule_level = critical_level(_design(cell, 0.0), ALPHA)   # the rule's: least favourable ratio
    race = None if not cell.racing else Race(z=float(ndtri(0.5 + cell.racing / 2.0)),
                                                 margin=-math.log1p(-MIN_EFFECT) / BOOT_SD)
    sim = simulate(np.random.default_rng([seed, 7]), m=cell.m, k=cell.k, b0=1, fresh=cell.boots - 1,
                   extra=cell.max_boots - cell.boots, reps=cell.reps, sd_ratio=cell.sd_ratio,
                   effects=effects, n=studies, critical=rule_level if sequential else None,
                   screen_ratio=cell.sd_ratio / math.sqrt(cell.fraction), race=race)
    named = sim.min_p <= rule_level
    hits = int(named.sum()) if cell.kind != "power" else int((named & (sim.who == 0)).sum())
    ci = sps.binomtest(hits, studies).proportion_ci(0.95, method="exact")
    return {**asdict(cell), "studies": studies, "rate": hits / studies, "low": float(ci.low), "high": float(ci.high),
            "any_winner": float(named.mean()), "critical_level": rule_level,
            "seconds": time.perf_counter() - started}


RATIOS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 100.0)


def ratio_table() -> list[dict[str, Any]]:
    """The critical nominal level by replicate/boot sd ratio (3 replicates a boot): smallest (the
    strictest) at 0 in every design."""
    designs = [(m, k, b, cap) for m in (2, 5, 20) for k in (1, 2) for b, cap in ((2, 2), (3, 3), (2, 5))]
    return [{"m": m, "k": k, "boots": b, "max_boots": cap,
             "levels": [critical_level(Design(m, k, 1, b - 1, cap - b, 3, r), ALPHA) for r in RATIOS]}
            for m, k, b, cap in designs]


def _in_design(r: dict[str, Any]) -> bool:
    return bool(r["racing"]) or r["fraction"] < 1.0


def _racing(r: dict[str, Any]) -> str:
    return f"{r['racing']:g}" if r["racing"] else "off"


def _null_table(rows: list[dict[str, Any]], *, design: bool = False) -> list[str]:
    extra = ("screen | racing | ", "---|---|") if design else ("", "")
    lines = [f"| m | k | boots | max boots | reps | ratio | {extra[0]}others | false winners | 95 % CI | nominal level |",
             f"|---|---|---|---|---|---|{extra[1]}---|---|---|---|"]
    for r in rows:
        if r["kind"] == "power":
            continue
        others = f"{r['worse_pct']:+g} %" if r["kind"] == "worse" else "equal"
        shape = f"{r['fraction']:g} | {_racing(r)} | " if design else ""
        lines.append(f"| {r['m']} | {r['k']} | {r['boots']} | {r['max_boots']} | {r['reps']} | {r['sd_ratio']:g} | "
                     f"{shape}{others} | {100 * r['rate']:.2f} % | [{100 * r['low']:.2f}, {100 * r['high']:.2f}] | "
                     f"{r['critical_level']:.4f} |")
    return lines


def markdown(rows: list[dict[str, Any]], ratios: list[dict[str, Any]], command: str) -> str:
    lines = ["# Finalist verdict: calibration and power through the whole pipeline", "",
             f"Produced by `{command}` (benchmarks/verdict_calibration.py).", "",
             f"alpha {ALPHA}; every cell {rows[0]['studies']:,} simulated studies; Clopper-Pearson 95 % interval. "
             "boots: a side in the fixed re-validation (screening boot included); max boots: the leader's cap with "
             "re-validation until decided; ratio: replicate sd / boot sd.", "",
             "## False winners (every candidate as good as the baseline, or worse)", "",
             *_null_table([r for r in rows if not _in_design(r)]),
             "", "## False winners with racing and short screening", "",
             f"screen: the search's runs' share of the prompts (replicate sd over sqrt of it); racing: its two-sided "
             f"confidence, minimum effect {100 * MIN_EFFECT:g} % at boot sd {100 * BOOT_SD:g} % (off: none).", "",
             *_null_table([r for r in rows if _in_design(r)], design=True)]
    nulls = [r for r in rows if r["kind"] != "power"]
    worst = max(nulls, key=lambda r: r["high"])
    design = [r for r in nulls if _in_design(r)]
    worst_design = max(design, key=lambda r: r["high"])
    highest_rate = max(design, key=lambda r: r["rate"])
    top = max(nulls, key=lambda r: r["rate"])
    lines += ["", f"Highest upper bound: {100 * worst['high']:.2f} % (bound {100 * BOUND:.1f} %): "
              f"{'every cell within it' if worst['high'] <= BOUND else 'EXCEEDED'}. Highest rate: "
              f"{100 * top['rate']:.2f} % (m {top['m']}, k {top['k']}, boots {top['boots']}, max boots "
              f"{top['max_boots']}, reps {top['reps']}, screen {top['fraction']:g}, racing {_racing(top)}).",
              f"With racing and short screening: highest rate {100 * highest_rate['rate']:.2f} % "
              f"(at most {100 * ALPHA:g} %: {'yes' if highest_rate['rate'] <= ALPHA else 'NO'}), highest upper bound "
              f"{100 * worst_design['high']:.2f} % ({'within' if worst_design['high'] <= BOUND else 'EXCEEDS'} "
              f"{100 * BOUND:.1f} %), over {len(design)} cells.", "",
              f"## Power (boot sd {100 * BOOT_SD:g} %, 5 candidates, one truly better)", "",
              "| effect | k | boots | max boots | reps | ratio | screen | racing | named the better one | 95 % CI |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["kind"] == "power":
            lines.append(f"| +{r['effect_pct']:g} % | {r['k']} | {r['boots']} | {r['max_boots']} | {r['reps']} | "
                         f"{r['sd_ratio']:g} | {r['fraction']:g} | {_racing(r)} | "
                         f"{100 * r['rate']:.1f} % | [{100 * r['low']:.1f}, {100 * r['high']:.1f}] |")
    lines += ["", "## Critical nominal level by replicate/boot sd ratio (3 replicates a boot)", "",
              "The rule uses ratio 0, the strictest: a study's own estimate of the ratio rests on 2-3 boot-level df.",
              "",
              "| m | k | boots | max boots | " + " | ".join(f"{r:g}" for r in RATIOS) + " | strictest at 0 |",
              "|---|---|---|---|" + "---|" * (len(RATIOS) + 1)]
    for r in ratios:
        levels = r["levels"]
        assert isinstance(levels, list)
        strictest = levels[0] <= min(levels) * 1.05   # within the simulation's error
        lines.append(f"| {r['m']} | {r['k']} | {r['boots']} | {r['max_boots']} | "
                     + " | ".join(f"{c:.4f}" for c in levels) + f" | {'yes' if strictest else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write verdict-calibration.{json,md} here")
    parser.add_argument("--markdown-from", type=Path, default=None,
                        help="print the tables of a verdict-calibration.json written before, simulating nothing")
    args = parser.parse_args()
    if args.markdown_from is not None:
        doc = json.loads(args.markdown_from.read_text())
        cells = doc["cells"]
        print(markdown(cells, doc["critical_by_ratio"],
                       f"python benchmarks/verdict_calibration.py --studies {cells[0]['studies']}"), end="")
        return
    todo = [(cell, args.studies, 1000 + i) for i, cell in enumerate(cells())]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run_cell, todo))
    command = f"python benchmarks/verdict_calibration.py --studies {args.studies}"
    ratios = ratio_table()
    text = markdown(rows, ratios, command)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "verdict-calibration.json").write_text(json.dumps({"cells": rows, "critical_by_ratio": ratios},
                                                                      indent=1) + "\n")
        (args.out / "verdict-calibration.md").write_text(text)


if __name__ == "__main__":
    main()
