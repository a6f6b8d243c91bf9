"""The verdict each H200 store gets today beside the one it stored (the rule it ran under), for
the write-ups: per config the objective's effect, interval, plain and selection-calibrated p,
t against the critical t, and per scenario the capacity or objective metric's effect.

    python scripts/h200/reanalyse_verdicts.py runs/h200/NAME ...   # unpacked stores
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from servetune.analysis import analysis, verdict_rule
from servetune.analysis.types import Effect
from servetune.store import StudyStore
from servetune.study.spec import StudySpec


def _effect(e: Effect) -> str:
    p_adj = "–" if e.p_adjusted is None else f"{e.p_adjusted:.3g}"
    judged = f"t {e.t:.2f} vs {e.critical:.2f} at {e.df} df, " if e.p_adjusted is not None else ""
    return (f"{e.effect_pct:+.1f} % [{e.ci_low_pct:+.1f}, {e.ci_high_pct:+.1f}], p {e.p_value:.3g}, "
            f"calibrated p {p_adj}, {judged}{e.verdict}{' (censored: ' + e.censored + ')' if e.censored else ''}")


def report(directory: Path) -> list[str]:
    store = StudyStore.in_dir(directory)
    spec = StudySpec.from_store(store.get_meta_json("spec"))
    stored = store.get_meta_json("verdict") or {}
    result = analysis.analyze(store, spec)
    c = result.components
    lines = [f"== {directory.name}: finalists {spec.finalists}, re-validation cap {verdict_rule.revalidation_cap(store)}",
             f"  stored verdict: {stored.get('winner')} | {stored.get('reason')}",
             f"  today: {result.winner.label if result.winner else None} | {result.winner_reason}"]
    if c is not None and c.known:
        lines.append(f"  objective: boot sd {100 * math.sqrt(c.boot_var):.1f} %, {c.boot_df} boot-level df, "
                     f"{c.rep_df} replicate df")
    metric = spec.objective.metric
    for config in result.configs:
        if config.objective_effect is None:
            continue
        role = "finalist" if config.is_finalist else "screened"
        lines.append(f"  {config.label} ({role}, {len(config.objective_boots)} boot(s)): "
                     f"{_effect(config.objective_effect)}")
        for name, scenario in config.scenarios.items():
            if metric in scenario.effects:
                lines.append(f"    {name} {metric}: {_effect(scenario.effects[metric])}")
    return lines


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(report(Path(arg))))
