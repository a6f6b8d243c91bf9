"""`servetune drift`: the regression protocol. Short requests before and after long ones, and a
test for a stepwise slowdown of decode (TPOT) or TTFT that the long requests leave behind."""

from .analysis import DriftAnalysis, PhaseEffect, analyze
from .protocol import DriftProtocol, Phase

__all__ = ["DriftAnalysis", "DriftProtocol", "Phase", "PhaseEffect", "analyze"]
