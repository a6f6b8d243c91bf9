"""The soak's result JSON: the verdict with its evidence, every window, and the crash when there was one."""

from __future__ import annotations

import dataclasses
from typing import Any

from .run import SoakPlan, SoakRun
from .trend import SoakAnalysis

COMPLETE, INTERRUPTED = "complete", "interrupted"


def soak_document(plan: SoakPlan, run: SoakRun, analysis: SoakAnalysis, target: dict[str, Any]) -> dict[str, Any]:
    return {
        "verdict": analysis.verdict, "verdict_line": analysis.line(),
        "status": INTERRUPTED if run.interrupted else COMPLETE,
        "target": target,
        "duration_s": plan.duration_s, "window_s": plan.window_s, "measured_s": run.seconds,
        "scenarios": [sc.model_dump(mode="json") for sc in plan.scenarios],
        "alpha": analysis.alpha, "note": analysis.note,
        "unstable": [t.signal for t in analysis.unstable],
        "trends": [dataclasses.asdict(t) for t in analysis.trends],
        "rss_start_mib": run.rss_start_mib,
        "windows": [w.to_dict() for w in run.windows],
        "crash": dataclasses.asdict(run.crash) if run.crash is not None else None,
    }
