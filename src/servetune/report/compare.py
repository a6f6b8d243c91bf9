"""`servetune compare A B`: two bench results or two studies' winners, per scenario and metric.

A side is a bench result JSON (`servetune bench --out`, per-request JSONL beside it), a directory
of such JSONs (replicates), or a study directory (its winner, else its baseline). With at least
two runs per side, replicate values are compared (Welch, Fieller CI); with fewer, latency metrics
are compared on the per-request data (bootstrap over requests); other metrics get no verdict.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from ..errors import ServetuneError
from ..load.records import SummaryLike
from ..stats.compare import compare, compare_percentile
from ..stats.types import Comparison, Verdict
from ..store.sqlite import StudyStore
from ..study.metrics import higher_is_better
from ..vocabulary import Outcome
from .requests import SERIES, read_records, resolve, series_ms

DEFAULT_METRICS = (
    "output_throughput", "request_throughput",
    "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "p99_e2el_ms",
)
_LATENCY = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(" + "|".join(SERIES) + r")_ms$")


# What makes two runs the same workload: a difference in any of these is a different experiment,
# not an effect of the server (the request count only changes the precision).
WORKLOAD_KEYS = ("input_len", "output_len", "concurrency", "rate", "burstiness", "endpoint", "dataset",
                 "sweep_input_lens", "shared_prefix", "ignore_eos", "temperature")
# Outcomes whose numbers are still a measurement of the server (the client was the limit: flagged, kept).
_MEASURED = (Outcome.ok, Outcome.client_bound)  # equal to the strings a bench JSON holds


@dataclass
class ScenarioRuns:
    summaries: list[SummaryLike] = field(default_factory=list)           # one per run
    requests: list[dict[str, np.ndarray]] = field(default_factory=list)  # one per run with a JSONL
    workloads: list[dict[str, Any]] = field(default_factory=list)        # WORKLOAD_KEYS of each run that says
    failures: list[str] = field(default_factory=list)                    # why a run is not a measurement


def workload_of(scenario: Any) -> dict[str, Any] | None:
    """The WORKLOAD_KEYS of a run's scenario (a bench JSON's `scenario` dict); None when it does not say."""
    if not isinstance(scenario, dict):
        return None
    return {k: scenario.get(k) for k in WORKLOAD_KEYS if k in scenario}


def failure_of(doc: dict[str, Any], path: Path) -> str | None:
    """Why a bench result is not a measurement (its outcome, or no request completed); None if it is."""
    outcome = doc.get("outcome")
    if outcome is not None and outcome not in _MEASURED:
        return f"{path.name}: the run ended {outcome}" + (f" ({doc['completed']} requests completed)"
                                                         if isinstance(doc.get("completed"), int) else "")
    if doc.get("completed") == 0:
        return f"{path.name}: no request completed"
    return None


@dataclass
class Side:
    source: str
    what: str                                    # e.g. "bench result", "study winner: max-num-seqs=32"
    scenarios: dict[str, ScenarioRuns]


def _scenario_name(doc: dict[str, Any], path: Path) -> str:
    scen = doc.get("scenario")
    if isinstance(scen, dict) and scen.get("name"):
        return str(scen["name"])
    return str(scen) if isinstance(scen, str) and scen else path.stem


def _bench_doc(path: Path) -> tuple[str, dict[str, Any], dict[str, np.ndarray] | None]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8
        raise ServetuneError(f"{path}: not a readable bench result JSON ({exc})") from exc
    if not isinstance(doc, dict) or not any(m in doc for m in DEFAULT_METRICS):
        raise ServetuneError(f"{path}: no `vllm bench serve` metrics in it (expected e.g. output_throughput)")
    records = resolve(doc.get("records_path"), path.parent) or resolve(path.stem + ".requests.jsonl", path.parent)
    if records is None and doc.get("records_path"):  # moved together with its JSON
        records = resolve(Path(str(doc["records_path"])).name, path.parent)
    requests = series_ms(read_records(records)) if records is not None else None
    return _scenario_name(doc, path), doc, requests


def _bench_side(paths: list[Path], source: str) -> Side:
    scenarios: dict[str, ScenarioRuns] = {}
    for p in paths:
        name, summary, requests = _bench_doc(p)
        runs = scenarios.setdefault(name, ScenarioRuns())
        runs.summaries.append(summary)
        if requests is not None:
            runs.requests.append(requests)
        if (workload := workload_of(summary.get("scenario"))) is not None:
            runs.workloads.append(workload)
        if (failure := failure_of(summary, p)) is not None:
            runs.failures.append(failure)
    return Side(source, f"bench result{'s' if len(paths) > 1 else ''} ({len(paths)} run{'s' * (len(paths) > 1)})",
                scenarios)


def _study_side(path: Path) -> Side:
    from ..analysis.analysis import analyze
    from ..study.spec import StudySpec

    store = StudyStore.open_existing(path, read_only=True)
    try:
        raw = store.spec_doc()
        try:
            spec = StudySpec.from_store(raw)
        except ValueError as exc:
            raise ServetuneError(f"{path}: the study spec stored in meta 'spec' is unreadable ({exc})") from exc
        analysis = analyze(store, spec)
        chosen = analysis.winner or analysis.baseline
        if chosen is None:
            raise ServetuneError(f"{path}: the study has no measured baseline or winner to compare")
        base_cfg = analysis.baseline.config if analysis.baseline else None
        label = chosen.config.label(base_cfg) if base_cfg is not None and not chosen.is_baseline else "baseline"
        scenarios: dict[str, ScenarioRuns] = {}
        workloads = {sc.name: workload_of(sc.model_dump(mode="json")) for sc in spec.scenarios}
        for run in store.runs():
            if run.trial_id not in chosen.trial_ids or not run.ok:
                continue
            runs = scenarios.setdefault(run.scenario, ScenarioRuns())
            runs.summaries.append(run.summary)
            if (workload := workloads.get(run.scenario)) is not None:
                runs.workloads.append(workload)
            records = resolve(run.records_path, path)
            if records is not None:
                runs.requests.append(series_ms(read_records(records)))
        what = f"study {'winner' if analysis.winner else 'baseline (no winner)'}: {label}"
        return Side(str(path), what, scenarios)
    finally:
        store.close()


def load_side(path: Path) -> Side:
    path = Path(path)
    if path.is_dir() and (path / StudyStore.FILENAME).is_file():
        return _study_side(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json"))
        if not files:
            raise ServetuneError(f"{path}: neither a study directory ({StudyStore.FILENAME}) nor bench result JSONs")
        return _bench_side(files, str(path))
    if path.is_file():
        return _bench_side([path], str(path))
    raise ServetuneError(f"{path}: no such file or directory")


@dataclass(frozen=True)
class Row:
    scenario: str
    metric: str
    a: float | None
    b: float | None
    comparison: Comparison | None
    verdict: Verdict | None
    method: str                     # how it was compared, or why not
    caveat: str | None = None       # why this scenario is not a fair comparison (compared anyway)


def _values(runs: ScenarioRuns, metric: str) -> list[float]:
    out = []
    for s in runs.summaries:
        v = s.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def verdict_of(c: Comparison) -> Verdict:
    """better/worse when the CI of B versus A excludes 0 % (p below 1 - confidence), else no difference."""
    if not math.isfinite(c.p_value) or c.p_value >= 1.0 - c.confidence or not math.isfinite(c.effect_pct):
        return Verdict.no_difference
    return Verdict.better if c.improvement_pct > 0 else Verdict.worse


def compare_metric(scenario: str, metric: str, a: ScenarioRuns, b: ScenarioRuns, confidence: float) -> Row:
    va, vb = _values(a, metric), _values(b, metric)
    point_a = float(np.mean(va)) if va else None
    point_b = float(np.mean(vb)) if vb else None
    hib = higher_is_better(metric)
    if len(va) >= 2 and len(vb) >= 2:
        c = compare(va, vb, higher_is_better=hib, confidence=confidence)
        return Row(scenario, metric, point_a, point_b, c, verdict_of(c), f"Welch over runs ({len(va)} vs {len(vb)})")
    m = _LATENCY.match(metric)
    if m and a.requests and b.requests:
        stat, series = m.group(1), m.group(2)
        ra = [r[series] for r in a.requests if r[series].size]
        rb = [r[series] for r in b.requests if r[series].size]
        if ra and rb:
            c = compare_percentile(ra, rb, stat, higher_is_better=hib, confidence=confidence)
            return Row(scenario, metric, c.baseline_mean, c.candidate_mean, c, verdict_of(c),
                       f"bootstrap over requests ({sum(x.size for x in ra)} vs {sum(x.size for x in rb)})")
    why = "one run per side and no per-request data" if m else "needs >= 2 runs per side"
    return Row(scenario, metric, point_a, point_b, None, None, why)


def comparability(a: ScenarioRuns, b: ScenarioRuns) -> str | None:
    """Why A and B of one scenario must not be compared: a failed run on a side, or a workload that
    differs between the sides (or within one); None when they may."""
    problems = [f"A {f}" for f in a.failures] + [f"B {f}" for f in b.failures]
    for label, runs in (("A", a), ("B", b)):
        if any(w != runs.workloads[0] for w in runs.workloads[1:]):
            problems.append(f"the runs of {label} are of different workloads")
    if a.workloads and b.workloads:
        wa, wb = a.workloads[0], b.workloads[0]
        differ = [f"{k} {wa[k]} vs {wb[k]}" for k in WORKLOAD_KEYS if k in wa and k in wb and wa[k] != wb[k]]
        if differ:
            problems.append("different workloads: " + ", ".join(differ))
    return "; ".join(problems) or None


def compare_sides(a: Side, b: Side, metrics: tuple[str, ...] | list[str] = DEFAULT_METRICS,
                  confidence: float = 0.95, *, anyway: bool = False) -> list[Row]:
    """Rows per common scenario and metric. A scenario whose sides are not comparable (comparability)
    is refused (ServetuneError), or with `anyway` compared and its rows carry the reason as `caveat`."""
    common = [s for s in a.scenarios if s in b.scenarios]
    if not common:
        raise ServetuneError(f"no scenario in common: A has {sorted(a.scenarios)}, B has {sorted(b.scenarios)}")
    caveats = {s: comparability(a.scenarios[s], b.scenarios[s]) for s in common}
    refused = [f"{s}: {why}" for s, why in caveats.items() if why]
    if refused and not anyway:
        raise ServetuneError("not comparable (pass --anyway to compare regardless): " + " | ".join(refused))
    return [dataclasses.replace(compare_metric(s, m, a.scenarios[s], b.scenarios[s], confidence), caveat=caveats[s])
            for s in common for m in metrics]


def _num(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:,.4g}"


def _effect(c: Comparison | None) -> str:
    if c is None or not math.isfinite(c.effect_pct):
        return "–"
    ci = (f" [{c.ci_low_pct:+.1f}, {c.ci_high_pct:+.1f}]"
          if math.isfinite(c.ci_low_pct) and math.isfinite(c.ci_high_pct) else "")
    return f"{c.effect_pct:+.1f} %{ci}"


_VERDICT_TEXT = {Verdict.better: "B better", Verdict.worse: "B worse",
                 Verdict.no_difference: "no detectable difference"}


def _verdict(v: Verdict | None) -> str:
    return "–" if v is None else _VERDICT_TEXT[v]


def rich_table(rows: list[Row], a: Side, b: Side, confidence: float = 0.95) -> Table:
    table = Table(title=f"B versus A ({confidence:.0%} CI)", caption=escape(f"A = {a.source} ({a.what})\n"
                                                                             f"B = {b.source} ({b.what})"))
    for col in ("scenario", "metric", "A", "B", "effect (CI)", "p", "verdict", "method"):
        table.add_column(col, justify="right" if col in ("A", "B", "p") else "left")
    style = {Verdict.better: "green", Verdict.worse: "red"}
    for r in rows:
        p = _num(r.comparison.p_value) if r.comparison else "–"
        v = _verdict(r.verdict)
        shown = f"[{style[r.verdict]}]{v}[/]" if r.verdict in style else v
        if r.caveat:  # compared with --anyway: the verdict is not a result
            shown = f"[bold red]NOT COMPARABLE[/] ({v})"
        table.add_row(r.scenario, r.metric, _num(r.a), _num(r.b), _effect(r.comparison), p, shown, r.method)
    for scenario, why in dict.fromkeys((r.scenario, r.caveat) for r in rows if r.caveat):
        table.caption = f"{table.caption}\n[bold red]{escape(scenario)} not comparable:[/] {escape(why or '')}"
    return table


def markdown(rows: list[Row], a: Side, b: Side, confidence: float = 0.95) -> str:
    lines = [
        "# servetune compare", "",
        f"- A: `{a.source}` ({a.what})",
        f"- B: `{b.source}` ({b.what})", "",
        f"Effect of B versus A in % of A, with its {confidence:.0%} confidence interval.", "",
        "| scenario | metric | A | B | effect (CI) | p | verdict | method |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p = _num(r.comparison.p_value) if r.comparison else "–"
        verdict = f"**not comparable** ({_verdict(r.verdict)})" if r.caveat else _verdict(r.verdict)
        lines.append(f"| {r.scenario} | {r.metric} | {_num(r.a)} | {_num(r.b)} | {_effect(r.comparison)} | {p} | "
                     f"{verdict} | {r.method} |")
    caveats = dict.fromkeys((r.scenario, r.caveat) for r in rows if r.caveat)
    lines += ["", *(f"- **{scenario} not comparable:** {why}" for scenario, why in caveats)] if caveats else []
    return "\n".join(lines) + "\n"
