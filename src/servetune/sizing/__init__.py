"""Sizing a deployment from measured capacities: how many replicas (and GPUs) each config needs
for a target load, at what cost, and a check of the answer on one replica.

`capacities.py` reads the capacities (a capacity search's JSON or a `maximize: capacity` study),
each as requests per second with its interval; `target.py` turns a rate, a trace's busy minute
(a percentile of its per-minute rates) and a growth factor into the load to serve;
`plan.py` is the arithmetic (replicas = ceil(target / capacity) at the capacity's point and at
both ends of its interval, GPUs, cost); `balance.py` deals a trace's requests to replicas as a
load balancer would (round-robin, or by session / shared prefix); `check.py` replays one
replica's share against a server and judges it as a capacity level is judged.
"""
