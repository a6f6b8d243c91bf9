"""A capacity search as JSON: the settings, the capacity with its interval, every level, and
every run's request records, written again as each level ends (so an interrupted search keeps
what it measured) and read back by `--resume`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import ServetuneError
from .estimate import CapacityEstimate
from .http import LoadKind, sample_from_records
from .levels import LevelResult, LevelSample
from .search import SearchResult, SearchSettings
from .slo import Slo

# status: the search is still measuring, ended, or was stopped before it ended (Ctrl-C, SIGTERM)
RUNNING, COMPLETE, INTERRUPTED = "running", "complete", "interrupted"


def _num(x: float) -> float | None:
    """JSON has no infinity or NaN: an open end of an interval (or no value) is null."""
    return x if math.isfinite(x) else None


def capacity_document(result: SearchResult, est: CapacityEstimate, slos: list[Slo], settings: SearchSettings,
                      load: str, extra: dict[str, Any], status: str = COMPLETE) -> dict[str, Any]:
    return {
        **extra,
        "status": status,
        "load": load,
        "slos": [str(s) for s in slos],
        "alpha": settings.alpha,
        "looks_per_run": settings.looks_per_run,
        "capacity": {"value": est.capacity, "low": est.low, "high": _num(est.high), "binding": est.binding,
                     "low_by": est.low_by, "high_by": est.high_by},
        "levels_measured": len(result.levels),
        "requests": result.requests,
        "seconds": round(result.seconds, 3),
        "error": result.error,
        "levels": [
            {"level": r.level, "runs": len(r.samples), "requests": r.requests, "completed": r.completed,
             "failed": sum(s.failed for s in r.samples),
             "verdict": r.verdict.value, "stopped_early": r.stopped,
             "goodput": _goodput(r, 1 - settings.alpha),
             "slos": [{"slo": str(j.slo), "key": j.slo.key, "values": j.n, "estimate_ms": _num(j.estimate),
                       "low_ms": _num(j.low), "high_ms": _num(j.high), "verdict": j.verdict.value}
                      for j in r.judgements],
             "run_files": [{"records": s.records, "stopped": s.stopped,
                            "stopped_verdict": s.stopped_verdict.value if s.stopped_verdict else None}
                           for s in r.samples]}
            for r in result.levels
        ],
    }


def _goodput(level: LevelResult, confidence: float) -> dict[str, Any] | None:
    """The level's goodput in req/s with its interval, and the requests it counts."""
    ci = level.goodput(confidence)
    if ci is None:
        return None
    return {"req_per_s": _num(ci.estimate), "low": _num(ci.low), "high": _num(ci.high), "requests": ci.n}


def write_document(path: Path, doc: dict[str, Any]) -> None:
    """Replace `path` whole (a reader or a kill mid-write never sees half a document)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def stored_samples(path: Path, load: LoadKind, slos: list[Slo]) -> tuple[dict[str, Any], list[LevelSample]]:
    """An earlier search's document and its runs, in the order they were measured, for `--resume`;
    a ServetuneError naming the file when it is not one, or a search of other SLOs or load."""
    where = f"--resume: {path}"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ServetuneError(f"{where}: cannot read a capacity search from it ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("levels"), list):
        raise ServetuneError(f"{where}: not a capacity search's JSON (no levels)")
    if doc.get("load") != load or doc.get("slos") != [str(s) for s in slos]:
        raise ServetuneError(f"{where}: a search of {doc.get('load')} under {', '.join(doc.get('slos') or [])}, "
                             f"not of {load} under {', '.join(str(s) for s in slos)}")
    samples = []
    for lv in doc["levels"]:
        for run in lv.get("run_files") or []:
            records = Path(run["records"]) if run.get("records") else None
            if records is None or not records.is_file():
                raise ServetuneError(f"{where}: level {lv['level']:g}'s run records {records} are missing")
            samples.append(sample_from_records(float(lv["level"]), records, run.get("stopped"), load,
                                               run.get("stopped_verdict"), slos))
    return doc, samples
