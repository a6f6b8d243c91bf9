"""`servetune soak`: one server under a long mixed load, in windows, watched for what a short run
cannot show (a crash on day three, memory or KV use that keeps growing, latency that drifts up),
ending with a verdict on its stability."""

from .duration import parse_duration
from .trend import SoakAnalysis, Trend, analyze

__all__ = ["SoakAnalysis", "Trend", "analyze", "parse_duration"]
