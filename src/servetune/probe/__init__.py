"""Probes: one-question commands on the engine layer (`servetune probe context`, `probe memory`)."""
