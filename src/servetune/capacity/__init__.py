"""Capacity under SLO: the highest load at which every latency SLO holds, with an interval.

`slo.py` parses SLOs and judges one with its percentile's own uncertainty; `sequential.py` places
a level's looks and the alpha each spends, so a level ends once its verdict is decided;
`monitor.py` ends a level early at such a look, once an SLO is surely lost, or once the queue
grows without bound; `search.py` brackets and bisects the load level over a `measure(level,
prior)` callable; `probe.py` picks the first level from a short saturation probe; `estimate.py`
turns the levels into the capacity and its interval; `http.py` measures a level against a server
with `load.run_scenario`; `document.py` writes the search as JSON as each level ends and reads it
back for `--resume`; `replay.py` hands stored runs back to a resumed search; `session.py` is
`servetune capacity`'s search on one server, from the probe to the last level's document.
"""
