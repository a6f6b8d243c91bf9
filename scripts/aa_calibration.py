#!/usr/bin/env python
"""A/A calibration on real boots: boot one config again and again, then ask the statistics how
often they call a difference between boots of the same config.

    scripts/aa_calibration.py measure [--study tests/e2e/studies/aa.yaml] [--boots 40]
                                      [--out docs/results/aa-calibration/boots.jsonl] [--work runs/aa-calibration]
    scripts/aa_calibration.py analyze [--out docs/results/aa-calibration/boots.jsonl] [--power-store DIR]

`measure` boots the study's baseline engine (with the study's scenarios and replicates) through
servetune's own engine and load layers, alternating `SERVETUNE_AA_LABEL=a|b`, a variable vLLM
ignores. Every finished boot is appended to the JSONL file at once; a rerun continues with the
next boot, so a killed measurement loses at most the boot in flight. `analyze` prints the
calibration (stats/calibration.py `aa_boot_calibration`) and the power these variances give
(stats/power.py; `--power-store DIR` adds a study store's, as `servetune status` prints it) as Markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from servetune.analysis.analysis import power_line, study_power
from servetune.engine import Engine, engine_for
from servetune.load.bench import run_scenario
from servetune.load.options import RunOptions
from servetune.stats import (
    Verdict,
    aa_boot_calibration,
    boots_needed,
    compare_many,
    detectable_effect_pct,
    rate_interval,
)
from servetune.store import StudyStore
from servetune.study.loader import load_study
from servetune.study.spec import StudySpec
from servetune.tune.trial import served_model_name
from servetune.vocabulary import Outcome

LABEL_VAR = "SERVETUNE_AA_LABEL"


def _done_boots(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _measure_boot(engine: Engine, spec, index: int, label: str, work: Path) -> dict:
    config = spec.baseline_config()
    config = type(config).of(flags=config.flags, env={**config.env, LABEL_VAR: label})
    log_path = work / "logs" / f"boot{index:03d}-{label}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started_at = time.time()
    started = engine.start(config, log_path)
    boot = {"boot": index, "label": label, "started_at": started_at, "outcome": str(started.outcome),
            "startup_s": started.boot_facts.startup_seconds if started.boot_facts else None,
            "cpu_layout": started.cpu_layout, "replicates": [],
            # the machine is shared: its load while this boot ran explains much of the boot's luck
            "loadavg_at_healthy": os.getloadavg()[0]}
    if started.outcome != Outcome.ok or started.server is None:
        boot["detail"] = started.detail
        return boot
    server = started.server
    try:
        model = served_model_name(server.url, None)
        for replicate in range(1, spec.replicates.max + 1):
            for scenario in spec.scenarios:
                engine.before_run(server.url, None)  # vLLM: empty the prefix cache, as a study does
                result = run_scenario(server.url, model, scenario, RunOptions(tokenizer_dir=Path(spec.engine.model),
                                      out_dir=work / "runs", run_id=f"boot{index:03d}-{scenario.name}-r{replicate}"))
                keep = ("output_throughput", "request_throughput", "mean_ttft_ms", "p99_ttft_ms",
                        "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms")
                boot["replicates"].append({"scenario": scenario.name, "replicate": replicate,
                                           "outcome": str(result.outcome),
                                           **{k: result.summary.get(k) for k in keep}})
    finally:
        stopped = engine.stop(server)
        if stopped.problem():
            boot["stop_problem"] = stopped.problem()
    boot["ended_at"] = time.time()
    boot["loadavg_at_end"] = os.getloadavg()[0]
    return boot


def measure(args: argparse.Namespace) -> None:
    # SIGTERM unwinds like Ctrl-C, so the boot in flight is stopped by its `finally`.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    spec = load_study(args.study)
    engine = engine_for(spec.engine)  # as a study builds it: dev mode for the prefix-cache reset
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = _done_boots(args.out)
    for index in range(len(done), args.boots):
        label = "ab"[index % 2]
        boot = _measure_boot(engine, spec, index, label, args.work)
        with args.out.open("a") as f:  # one line per boot, written whole: a kill loses only the boot in flight
            f.write(json.dumps(boot) + "\n")
        reps = [r.get(spec.objective.metric) for r in boot["replicates"]]
        print(f"{time.strftime('%H:%M:%S')} boot {index} ({label}): {boot['outcome']}, "
              f"startup {boot['startup_s']}, {spec.objective.metric} {reps}", flush=True)


def _values(boot: dict, metric: str) -> list[float]:
    return [r[metric] for r in boot["replicates"] if r["outcome"] == "ok" and r.get(metric)]


def _pct(x: float) -> str:
    return f"{x:+.1f} %"


def _rate(r) -> str:
    return f"{r.estimate * r.n:.0f}/{r.n} = {100 * r.estimate:.1f} % [{100 * r.low:.1f}, {100 * r.high:.1f}]"


def _rows(judged, boots: list[dict], width: int) -> list[str]:
    """One table row per comparison: the boots' numbers and labels as measured (failed boots are
    skipped, so a comparison's sides need not carry the labels a and b)."""
    out = []
    for k, (c, verdict) in enumerate(judged):
        if width == 1:
            base, cand = [boots[2 * k]], [boots[2 * k + 1]]
        else:
            base, cand = [boots[4 * k], boots[4 * k + 2]], [boots[4 * k + 1], boots[4 * k + 3]]
        names = " vs ".join(",".join(f"{b['boot']}{b['label']}" for b in side) for side in (base, cand))
        out.append(f"| {names} | {_pct(c.effect_pct)} [{_pct(c.ci_low_pct)}, {_pct(c.ci_high_pct)}] | "
                   f"{c.p_value:.3f} | {verdict} |")
    return out


def _power_table(components, alpha: float, base_boots: int) -> list[str]:
    lines = ["| replicates per boot | detectable with 1 boot vs the baseline's "
             f"{base_boots} | boots per side for 10 % |", "| --- | --- | --- |"]
    for reps in (1, 2, 3, 5, 10):
        d = detectable_effect_pct(components, replicates=reps, boots=1, baseline_boots=base_boots, alpha=alpha)
        need = boots_needed(components, effect_pct=10.0, replicates=reps, alpha=alpha)
        lines.append(f"| {reps} | ±{d:.1f} % | {need if need else '> 1000'} |")
    return lines


def _store_power(path: Path) -> list[str]:
    """`servetune status`'s power line, and the table, from a study store (e.g. the H200's)."""
    store = StudyStore.open_existing(path, read_only=True)
    try:
        spec = StudySpec.model_validate(store.get_meta_json("spec"))
        power = study_power(store, spec)
    finally:
        store.close()
    return [f"`{path}` ({spec.name}): {power_line(power)}", "",
            *_power_table(power.components, spec.alpha, power.baseline_boots)]


def analyze(args: argparse.Namespace) -> None:
    spec = load_study(args.study)
    metric = spec.objective.metric
    done = _done_boots(args.out)
    measured = [b for b in done if b["outcome"] == "ok" and _values(b, metric)]
    values = [_values(b, metric) for b in measured]
    cal = aa_boot_calibration(values, alpha=spec.alpha, higher_is_better=spec.objective.maximizing,
                              min_effect_pct=spec.min_effect_pct)
    c = cal.components
    startup = [b["startup_s"] for b in done if b.get("startup_s")]
    # The same pairs judged on their replicates alone (Welch), as if boots did not exist.
    pooled = [compare_many(values[i], {"b": values[i + 1]}, higher_is_better=spec.objective.maximizing,
                           alpha=spec.alpha)["b"].verdict for i in range(0, len(values) - 1, 2)]
    lines = [
        f"{len(done)} boots ({len(done) - len(measured)} failed), {metric} of `{spec.scenarios[0].name}`, "
        f"{spec.replicates.min} replicates per boot, alpha {spec.alpha}; startup {min(startup):.0f}–"
        f"{max(startup):.0f} s.", "",
        f"Variance components (log scale, all boots one config): boot sd {100 * math.sqrt(c.boot_var):.1f} %, "
        f"replicate sd {100 * math.sqrt(c.rep_var):.1f} % ({c.boot_df} boot-level df, {c.rep_df} replicate df).", "",
        "| comparisons | any verdict (95 % Clopper-Pearson CI) |", "| --- | --- |",
        f"| one boot vs one boot (p < alpha: promising / not promising) | {_rate(cal.single_rate)} |",
        *([f"| two boots vs two boots (better / worse, as a study judges finalists) | {_rate(cal.paired_rate)} |"]
          if cal.paired_rate else []),
        f"| all | {_rate(cal.any_rate)} |",
        f"| one vs one on replicates alone (Welch, boots ignored) | "
        f"{_rate(rate_interval(sum(v is not Verdict.no_difference for v in pooled), len(pooled), 'welch'))} |",
        "", "| boots (number, label) | effect [CI] | p | verdict |", "| --- | --- | --- | --- |",
        *_rows(cal.single, measured, 1), *_rows(cal.paired, measured, 2),
        "", "Power (90 %, alpha " f"{spec.alpha}) from these components:", "",
        *_power_table(c, spec.alpha, 2),
    ]
    for store in args.power_store:
        lines += ["", *_store_power(store)]
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["measure", "analyze"])
    parser.add_argument("--study", type=Path, default=Path("tests/e2e/studies/aa.yaml"))
    parser.add_argument("--boots", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("docs/results/aa-calibration/boots.jsonl"))
    parser.add_argument("--work", type=Path, default=Path("runs/aa-calibration"))
    parser.add_argument("--power-store", type=Path, action="append", default=[],
                        help="analyze: also the power of this study directory's measured variances")
    args = parser.parse_args()
    measure(args) if args.command == "measure" else analyze(args)


if __name__ == "__main__":
    sys.exit(main())
