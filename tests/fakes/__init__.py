"""Fakes for tests that need controlled timings (named as fakes; never a stand-in for vLLM)."""

from pathlib import Path

# A model directory with a config.json and no weights: the model a fake engine's study names, so
# that the study's start (which checks that the model is there, as `plan` does) passes. No fake reads it.
MODEL_WITHOUT_WEIGHTS = Path(__file__).resolve().parents[1] / "fixtures" / "model-without-weights"
