"""Reports (Markdown, self-contained HTML, plots), the ready-to-paste config, and `compare`."""

from .write import write_report

__all__ = ["write_report"]
