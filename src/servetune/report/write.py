"""write_report: report.md (+ plots/*.png), report.html and the ready-to-paste config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..analysis.types import StudyAnalysis
from ..store.sqlite import StudyStore
from . import context
from .emit import write_snippets
from .html import render_html
from .markdown import render_markdown


def write_report(analysis: StudyAnalysis, store: StudyStore, out_dir: Path,
                 profiles: Mapping[str, StudyAnalysis] | None = None) -> dict[str, Path]:
    """Write the report files under `out_dir`; returns name -> path.

    The emitted config goes to `winner/` when a winner was named, else to `baseline/`, and
    nowhere when the baseline never produced a measurement (a config that never ran is no advice).
    Each profile's (`profiles`: its analysis, analysis/profiles.py) goes to `profiles/NAME/winner/` or
    `profiles/NAME/baseline/` by the same rule.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = context.build(analysis, store, dict(profiles or {}))
    paths: dict[str, Path] = {}

    plot_dir = out_dir / "plots"
    plot_files: dict[str, str] = {}
    if data.plots:
        plot_dir.mkdir(exist_ok=True)
    for p in data.plots:
        path = plot_dir / f"{p.name}.png"
        path.write_bytes(p.png)
        plot_files[p.name] = f"plots/{path.name}"
        paths[f"plot:{p.name}"] = path

    paths["markdown"] = out_dir / "report.md"
    paths["markdown"].write_text(render_markdown(data, plot_files))
    paths["html"] = out_dir / "report.html"
    paths["html"].write_text(render_html(data))

    if data.deployment is not None:
        for name, path in write_snippets(data.deployment, out_dir / data.emitted_for).items():
            paths[f"{data.emitted_for}:{name}"] = path
    for profile in data.profiles:
        if profile.deployment is not None:
            folder = out_dir / "profiles" / profile.name / profile.emitted_for
            for name, path in write_snippets(profile.deployment, folder).items():
                paths[f"profile:{profile.name}:{profile.emitted_for}:{name}"] = path
    return paths
