"""Tuning studies: the runner that wires engine, load, store and search together, and the analysis."""
