"""Server-side view of a Run from Prometheus /metrics (vLLM v1 metric names).

Counters are read before and after the run and reported as deltas (summed over label sets,
e.g. over engines); gauges are sampled during the run (every 0.5 s) and reported as peaks.
During the run only the few gauge lines are kept (a byte-prefix filter), and every parse with
prometheus_client's parser happens afterwards, so scraping costs the client's loop little.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .. import server_http
from . import speculative_metrics

# family name (as the parser reports it, counters without _total) -> result key
COUNTERS = {
    "vllm:num_preemptions": "preemptions",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens": "generation_tokens",
    "vllm:spec_decode_num_drafts": "spec_decode_drafts",
    "vllm:spec_decode_num_draft_tokens": "spec_decode_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "spec_decode_accepted_tokens",
    "vllm:request_success": "requests_succeeded",
    # One sample per draft position (label `position`): a key per position, see per_label_key.
    "vllm:spec_decode_num_accepted_tokens_per_pos": "spec_decode_accepted_tokens_pos",
}
# Families whose samples are kept apart by one label: result key = the family's key + the label's value.
PER_LABEL = {"vllm:spec_decode_num_accepted_tokens_per_pos": "position"}
GAUGES = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}
SAMPLE_INTERVAL_S = 0.5
_GAUGE_PREFIXES = tuple(name.encode() for name in GAUGES)


def parse_values(text: str, wanted: dict[str, str]) -> dict[str, float]:
    """Per wanted family, its samples summed over label sets (engines), except the KV cache
    usage fraction, which takes the fullest engine, and the PER_LABEL families, summed per value
    of their label (`spec_decode_accepted_tokens_pos0`, ...); `_created` samples are skipped."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        family_key = wanted.get(fam.name)
        if family_key is None:
            continue
        label = PER_LABEL.get(fam.name)
        for s in fam.samples:
            if s.name.endswith("_created") or (label is not None and label not in s.labels):
                continue
            key = family_key + s.labels[label] if label is not None else family_key
            v = float(s.value)
            out[key] = max(out.get(key, v), v) if key == "kv_cache_usage" else out.get(key, 0.0) + v
    return out


class Scraper:
    """before() / start sampling / after(); `result()` gives deltas and peaks."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
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
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.error = f"/metrics: {type(exc).__name__}: {exc}"
            return None

    async def _counters(self) -> dict[str, float] | None:
        raw = await self._get()
        if raw is None:
            return None
        text = raw.decode(errors="replace")
        self._keep_gauges(raw)
        return parse_values(text, COUNTERS)

    def _keep_gauges(self, raw: bytes) -> None:
        self._scrapes.append(b"\n".join(line for line in raw.splitlines() if line.startswith(_GAUGE_PREFIXES)))

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

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": len(self._scrapes)}
        if self._before is not None and self._after is not None:
            for key, value in self._after.items():
                out[key] = value - self._before.get(key, 0.0)
            out.update(speculative_metrics.derived(out))
        peaks: dict[str, float] = {}
        for chunk in self._scrapes:
            for key, value in parse_values(chunk.decode(errors="replace") + "\n", GAUGES).items():
                peaks[key] = max(peaks.get(key, value), value)
        for key, value in peaks.items():
            out[f"peak_{key}"] = value
        if self.error:
            out["error"] = self.error
        return out
