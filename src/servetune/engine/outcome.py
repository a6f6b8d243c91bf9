"""Outcomes of trials and runs: defined in servetune/vocabulary.py, which the measuring layers
(load/, capacity/, drift/) import without importing engine/; importable here as before."""

from ..vocabulary import Outcome, for_http_status

__all__ = ["Outcome", "for_http_status"]
