"""report.md: the report as Markdown, figures as PNG files beside it."""

from __future__ import annotations

from collections.abc import Mapping

from .context import ReportData
from .templating import environment


def render_markdown(data: ReportData, plot_files: Mapping[str, str]) -> str:
    """`plot_files`: plot name -> path relative to the Markdown file."""
    return environment(autoescape=False).get_template("report.md.j2").render(d=data, plot_files=plot_files)
