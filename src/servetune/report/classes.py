"""The report's traffic classes: each class of a mixed scenario on each config, its latencies
with their intervals and its own SLOs' verdict (analysis/class_proof.py judged them)."""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis.class_proof import TABLE_KEYS
from ..analysis.types import ClassStat, SloState, StudyAnalysis
from ..engine.config import Config


@dataclass(frozen=True)
class ClassRow:
    label: str                    # the config
    scenario: str
    traffic_class: str
    requests: int                 # the class's requests pooled over the config's boots
    stats: list[ClassStat]        # TABLE_KEYS, in order
    verdict: str                  # met | unproven | violated over the class's SLOs; "" without one
    open_slos: list[str]          # the class's SLOs not met, as text


def class_rows(analysis: StudyAnalysis, base: Config | None) -> list[ClassRow]:
    """Every mixed scenario's classes, config by config: the baseline and the winner first."""
    win_key = analysis.winner.key if analysis.winner else None
    order = sorted(analysis.configs, key=lambda c: (not c.is_baseline, c.key != win_key))
    rows = []
    for c in order:
        label = c.label if c.is_baseline or base is None else c.config.label(base)
        for scenario, result in c.scenarios.items():
            for cls in result.classes:
                state = cls.slo_state
                rows.append(ClassRow(label, scenario, cls.name, cls.requests, [cls.stats[k] for k in TABLE_KEYS],
                                     str(state) if state is not None else "",
                                     [ch.text() for ch in cls.slo_checks if ch.state is not SloState.met]))
    return rows
