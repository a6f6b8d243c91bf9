"""How many trials and how much recorded device time each search strategy needs to come within 2 %
of the best config, replayed against one exhaustive grid study (servetune.tune.replay says how).

Run: PYTHONPATH=src python benchmarks/replay_strategies.py STORE_DIR [--seeds 50] [--within-pct 2]
     [--strategies ofat,grid,optuna] [--budget N] [--json OUT] [--stop-below P] [--race]

With --stop-below (the study file's stopping.chance_below) or --race, a second table: each
strategy with the stopping rule and/or racing (tune.replay.Economy says how each is modelled)
against itself without, on the same seeds: device time in all, the share of seeds whose leader is
the one the run without them ended with, and the share within --within-pct of the grid's best.

STORE_DIR is a grid study's directory (its study.sqlite), e.g. the H200 grid of
examples/h200/qwen3-8b-grid.yaml unpacked from docs/results/h200/qwen3-8b-grid.tar.xz. The last
row is the grid itself as it ran: every config once, its recorded time in all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servetune.errors import ServetuneError  # noqa: E402
from servetune.search import STRATEGIES  # noqa: E402
from servetune.store import StudyStore  # noqa: E402
from servetune.study.spec import StudySpec  # noqa: E402
from servetune.tune.replay import Economy, GridTable, Saving, SeedResult, Summary, benchmark, savings  # noqa: E402

# baseline proposes nothing: it is the study's first trial in every row already
DEFAULT_STRATEGIES = [name for name in STRATEGIES if name != "baseline"]


def load_table(store_dir: Path) -> GridTable:
    store = StudyStore.open_existing(store_dir, read_only=True)
    try:
        raw = store.get_meta_json("spec")
        if raw is None:
            raise ServetuneError(f"{store_dir}: the store keeps no study spec")
        return GridTable.from_store(store, StudySpec.from_store(raw), where=str(store_dir))
    finally:
        store.close()


def _num(value: float | None, fmt: str) -> str:
    return "not reached" if value is None else format(value, fmt)


def render(table: GridTable, results: dict[str, tuple[Summary, list[SeedResult]]], within_pct: float,
           budget: int, console: Console) -> None:
    best = table.best
    near = sorted(table.entries[k].label for k in table.targets(within_pct))
    console.print(f"grid: {len(table.entries)} configs, best {best.label} (objective {best.true_value:.4f} x the "
                  f"baseline); within {within_pct:g} %: {', '.join(near)}")
    seeds = next(iter(results.values()))[0].seeds if results else 0
    out = Table(title=f"Boots and recorded minutes to a config within {within_pct:g} % of the grid's best "
                      f"({seeds} seeds, at most {budget} candidates; the baseline's boots counted)")
    for column in ("strategy", "reached", "boots median", "boots p90", "minutes median", "minutes p90",
                   "spent in all (min)", "× cheaper than grid"):
        out.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=column == "strategy")
    for summary, _ in results.values():
        out.add_row(summary.strategy, f"{summary.reached_share:.0%}", _num(summary.boots_median, ".0f"),
                    _num(summary.boots_p90, ".0f"), _num(summary.minutes_median, ".1f"),
                    _num(summary.minutes_p90, ".1f"), f"{summary.spent_minutes_median:.1f}",
                    "—" if summary.times_cheaper is None else f"{summary.times_cheaper:.1f}")
    out.add_row("whole grid (as run)", "100%", f"{table.grid_boots}", f"{table.grid_boots}",
                f"{table.grid_s / 60:.1f}", f"{table.grid_s / 60:.1f}", f"{table.grid_s / 60:.1f}", "1.0")
    console.print(out)


def render_savings(rows: list[Saving], economy: Economy, within_pct: float, console: Console) -> None:
    what = " and ".join(w for w in (
        f"stopping rule at {economy.stop_below:g}" if economy.stop_below is not None else "",
        f"racing (first replicate below the leader by min effect + {economy.race_sds:g} sd)" if economy.race else "",
    ) if w)
    out = Table(title=f"With the {what}, against the same strategy without ({rows[0].seeds} seeds)")
    for column in ("strategy", "today min (median)", "now min (median)", "now / today", "boots median",
                   "same leader as today", "as good as today's", f"leader within {within_pct:g} %", "stopped by rule", "raced median"):
        out.add_column(column, justify="left" if column == "strategy" else "right", no_wrap=column == "strategy")
    for r in rows:
        out.add_row(r.strategy, f"{r.today_minutes_median:.1f}", f"{r.minutes_median:.1f}", f"{r.ratio:.2f}",
                    f"{r.boots_median:.0f}", f"{r.same_leader_share:.0%}", f"{r.as_good_share:.0%}",
                    f"{r.near_best_share:.0%}",
                    f"{r.stopped_share:.0%}", f"{r.raced_median:.0f}")
    console.print(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir", type=Path, help="a grid study's directory (holds study.sqlite)")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--within-pct", type=float, default=2.0)
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES),
                        help=f"comma-separated, of: {', '.join(STRATEGIES)}")
    parser.add_argument("--budget", type=int, default=None, help="candidates per replay (default: the grid's size)")
    parser.add_argument("--json", type=Path, default=None, help="write every summary and seed here")
    parser.add_argument("--stop-below", type=float, default=None,
                        help="replay the stopping rule with this stopping.chance_below too (e.g. 0.05)")
    parser.add_argument("--race", action="store_true", help="replay racing too (tune.replay.Economy)")
    args = parser.parse_args(argv)
    try:
        table = load_table(args.store_dir)
        names = [n.strip() for n in args.strategies.split(",") if n.strip()]
        if not names:
            raise ServetuneError("--strategies: empty")
        budget = table.candidates() if args.budget is None else args.budget
        if budget < 1:
            raise ServetuneError(f"--budget: {budget}; at least 1")
        if args.stop_below is not None and not 0 < args.stop_below <= 0.15:
            raise ServetuneError(f"--stop-below: {args.stop_below}; above 0 and at most 0.15 (as stopping.chance_below)")
        results = benchmark(table, names, args.seeds, budget=budget, within_pct=args.within_pct)
        console = Console(width=160)
        render(table, results, args.within_pct, budget, console)
        economy = Economy(stop_below=args.stop_below, race=args.race)
        saved = (savings(table, names, args.seeds, economy, budget=budget, within_pct=args.within_pct)
                 if args.stop_below is not None or args.race else [])
        if saved:
            render_savings(saved, economy, args.within_pct, console)
        if args.json is not None:
            args.json.write_text(json.dumps({
                "store": str(args.store_dir), "within_pct": args.within_pct, "budget": budget,
                "grid": {"configs": len(table.entries), "boots": table.grid_boots, "seconds": table.grid_s,
                         "best": table.best.label, "best_objective": table.best.true_value,
                         "targets": sorted(table.entries[k].label for k in table.targets(args.within_pct))},
                "strategies": {n: {"summary": asdict(s), "seeds": [asdict(r) for r in rs]}
                               for n, (s, rs) in results.items()},
                "economy": asdict(economy) if saved else None,
                "savings": [asdict(r) for r in saved],
            }, indent=2) + "\n")
    except (ServetuneError, OSError) as exc:
        if os.environ.get("SERVETUNE_DEBUG"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
