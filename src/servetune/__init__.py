"""servetune: find the fastest serving configuration of an LLM inference server, and prove it."""

__version__ = "0.1.0"
