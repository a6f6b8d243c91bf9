"""Server-side view of a Run from Prometheus /metrics (the engine's family names, servetune/vocabulary.py).

Counters are read before and after the run and reported as deltas (summed over label sets,
e.g. over engines); gauges are sampled during the run (every 0.5 s) and reported as peaks.
During the run only the few gauge lines are kept (a byte-prefix filter), and every parse with
prometheus_client's parser happens afterwards, so scraping costs the client's loop little.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .. import server_http
from ..vocabulary import ANY_ENGINE_METRIC_NAMES, MetricNames
from . import speculative_metrics

# Every engine's names: the default for a server of unknown kind (bench, capacity); a study's engine
# passes its own.
COUNTERS = dict(ANY_ENGINE_METRIC_NAMES.counters)
GAUGES = dict(ANY_ENGINE_METRIC_NAMES.gauges)
SAMPLE_INTERVAL_S = 0.5


def parse_values(text: str, wanted: dict[str, str], per_label: Mapping[str, str] | None = None,
                 histograms: Mapping[str, str] | None = None) -> dict[str, float]:
    """Per wanted family, its samples summed over label sets (engines), except the KV cache
    usage fraction, which takes the fullest engine, and the `per_label` families, summed per value
    of their label (`spec_decode_accepted_tokens_pos0`, ...); `_created` samples are skipped.
    A `histograms` family gives `KEY_sum` and `KEY_count` (its buckets are not kept)."""
    out: dict[str, float] = {}
    histograms = histograms or {}
    for fam in text_string_to_metric_families(text):
        if fam.name in histograms:
            for s in fam.samples:
                part = s.name[len(fam.name):]
                if part in ("_sum", "_count"):
                    key = histograms[fam.name] + part
                    out[key] = out.get(key, 0.0) + float(s.value)
            continue
        family_key = wanted.get(fam.name)
        if family_key is None:
            continue
        label = (per_label or {}).get(fam.name)
        for s in fam.samples:
            if s.name.endswith("_created") or (label is not None and label not in s.labels):
                continue
            key = family_key + s.labels[label] if label is not None else family_key
            v = float(s.value)
            out[key] = max(out.get(key, v), v) if key == "kv_cache_usage" else out.get(key, 0.0) + v
    return out


def counter_values(text: str, names: MetricNames = ANY_ENGINE_METRIC_NAMES) -> dict[str, float]:
    """A /metrics page's counters and histogram sums and counts, under the engine's names: what a
    run's deltas are taken of."""
    return parse_values(text, dict(names.counters), names.per_label, names.histograms)


def read_counters(base_url: str, names: MetricNames = ANY_ENGINE_METRIC_NAMES,
                  timeout_s: float = 30.0) -> dict[str, float]:
    """`counter_values` of the server's /metrics now, read synchronously (scripts, tests); a
    loopback server is never reached through a proxy."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as resp:
        return counter_values(resp.read().decode(errors="replace"), names)


def histogram_means(deltas: Mapping[str, float], keys: Iterable[str]) -> dict[str, float]:
    """`KEY_mean_ms` of each histogram that counted something in the run (seconds -> ms):
    e.g. `server_ttft_mean_ms`, the engine's own mean TTFT over the run's requests."""
    out: dict[str, float] = {}
    for key in keys:
        count = deltas.get(f"{key}_count", 0.0)
        if count > 0:
            out[f"{key}_mean_ms"] = deltas.get(f"{key}_sum", 0.0) / count * 1000.0
    return out


class Scraper:
    """before() / start sampling / after(); `result()` gives deltas and peaks."""

    def __init__(self, base_url: str, api_key: str | None = None, names: MetricNames = ANY_ENGINE_METRIC_NAMES) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.names = names
        self._gauge_prefixes = tuple(name.encode() for name in names.gauges)
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._before: dict[str, float] | None = None
        self._after: dict[str, float] | None = None
        self._scrapes: list[bytes] = []   # the gauge lines of each scrape
        self._task: asyncio.Task[None] | None = None
        self.error: str | None = None

    async def _get(self) -> bytes | None:
        if self._session is None:
            self._session = server_http.session(self._api_key, aiohttp.ClientTimeout(total=5))
        try:
            async with self._session.get(self.url) as resp:
                if resp.status != 200:
                    self.error = f"/metrics answered HTTP {resp.status}"
                    return None
                return await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self.error = f"/metrics: {type(exc).__name__}: {exc}"
            return None

    async def _counters(self) -> dict[str, float] | None:
        raw = await self._get()
        if raw is None:
            return None
        text = raw.decode(errors="replace")
        self._keep_gauges(raw)
        return counter_values(text, self.names)

    def _keep_gauges(self, raw: bytes) -> None:
        self._scrapes.append(b"\n".join(line for line in raw.splitlines() if line.startswith(self._gauge_prefixes)))

    async def _sample_loop(self) -> None:
        while True:
            t = time.perf_counter()
            raw = await self._get()
            if raw is not None:
                self._keep_gauges(raw)
            await asyncio.sleep(max(SAMPLE_INTERVAL_S - (time.perf_counter() - t), 0.05))

    async def before(self) -> None:
        self._before = await self._counters()
        self._task = asyncio.get_running_loop().create_task(self._sample_loop())

    async def after(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._after = await self._counters()
        if self._session is not None:
            await self._session.close()

    async def close(self) -> None:
        """Stop sampling and close the session, whether or not `after` ran (a run given up midway)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._session is not None and not self._session.closed:
            await self._session.close()

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": len(self._scrapes)}
        if self._before is not None and self._after is not None:
            for key, value in self._after.items():
                out[key] = value - self._before.get(key, 0.0)
            out.update(speculative_metrics.derived(out))
            out.update(histogram_means(out, self.names.histograms.values()))
        peaks: dict[str, float] = {}
        for chunk in self._scrapes:
            for key, value in parse_values(chunk.decode(errors="replace") + "\n", dict(self.names.gauges)).items():
                peaks[key] = max(peaks.get(key, value), value)
        for key, value in peaks.items():
            out[f"peak_{key}"] = value
        if self.error:
            out["error"] = self.error
        return out
