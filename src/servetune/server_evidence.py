"""What a server said about its KV pool and queues during a config's runs, read from the scraped
/metrics (`RunResult.server_stats`), and the thresholds at which the pool counts as tight or roomy.

Shared by the report's advice, the memory probe and the search's evidence before boots, so none of
them imports another's layer for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .load.speculative_metrics import stat_number

# Keys of RunResult.server_stats, as servetune.load.scrape names them (deltas; peaks prefixed "peak_").
# The engine-neutral keys every engine's scrape stores (servetune/vocabulary.py).
_PREEMPTIONS = "preemptions"
_PREFIX_HITS = "prefix_cache_hits"
_PREFIX_QUERIES = "prefix_cache_queries"
_KV_PEAK = "peak_kv_cache_usage"
_WAITING_PEAK = "peak_waiting"
_RUNNING_PEAK = "peak_running"

KV_TIGHT = 0.90   # peak KV usage at which the pool counts as tight
KV_LOW = 0.60     # below this, more KV memory buys nothing



@dataclass(frozen=True)
class Evidence:
    """What the server said during one config's runs of one scenario (None: not scraped)."""

    preemptions: float | None = None
    kv_usage_peak: float | None = None     # fraction of the KV pool, 0..1
    prefix_hit_rate: float | None = None   # fraction of prefix-cache queries that hit, 0..1
    waiting_peak: float | None = None
    running_peak: float | None = None

    @classmethod
    def of(cls, stats: Mapping[str, Any]) -> Evidence:
        hits, queries = stat_number(stats, _PREFIX_HITS), stat_number(stats, _PREFIX_QUERIES)
        return cls(preemptions=stat_number(stats, _PREEMPTIONS), kv_usage_peak=stat_number(stats, _KV_PEAK),
                   prefix_hit_rate=hits / queries if hits is not None and queries else None,
                   waiting_peak=stat_number(stats, _WAITING_PEAK), running_peak=stat_number(stats, _RUNNING_PEAK))

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.preemptions, self.kv_usage_peak, self.prefix_hit_rate,
                                       self.waiting_peak, self.running_peak))

    @property
    def pool_tight(self) -> bool:
        return (self.preemptions or 0) > 0 or (self.kv_usage_peak or 0.0) >= KV_TIGHT
