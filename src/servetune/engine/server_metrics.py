"""Each engine's /metrics family names: defined in servetune/vocabulary.py, which the measuring
layers (load/, capacity/, drift/) import without importing engine/; importable here as before."""

from ..vocabulary import VLLM_METRIC_NAMES, MetricNames

__all__ = ["VLLM_METRIC_NAMES", "MetricNames"]
