"""report.html: one self-contained file (CSS inline, figures as base64 PNG, no external URL)."""

from __future__ import annotations

import base64

from .context import ReportData
from .templating import environment


def render_html(data: ReportData) -> str:
    images = {p.name: "data:image/png;base64," + base64.b64encode(p.png).decode("ascii") for p in data.plots}
    return environment(autoescape=True).get_template("report.html.j2").render(d=data, images=images)
