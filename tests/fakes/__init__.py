"""Fakes for tests that need controlled timings (named as fakes; never a stand-in for vLLM)."""
