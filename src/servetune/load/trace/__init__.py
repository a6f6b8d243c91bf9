"""Recorded traces replayed as a Run's traffic: readers per format (jsonl.py, csv_formats.py,
formats.py detects), the window a Run replays (window.py), prompts with the trace's prefix
blocks (synth.py), the hit rate it implies (prefix.py), fidelity of a run (fidelity.py) and the
summary of a trace (summary.py)."""
