"""Capacity under SLO: the highest load at which every latency SLO holds, with an interval.

`slo.py` parses SLOs and judges one with its percentile's own uncertainty; `monitor.py` ends a
level early once an SLO is surely lost or the queue grows without bound; `search.py` brackets and
bisects the load level over a `measure(level)` callable; `estimate.py` turns the levels into the
capacity and its interval; `http.py` measures a level against a server with `load.run_scenario`.
"""
