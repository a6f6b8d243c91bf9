"""STAND-IN engine whose speed the test sets: every "boot" re-paces one in-process fake streaming
server, its inter-token latency the config's own times a per-boot factor drawn from a seeded
log-normal (boot-to-boot noise). A `servetune tune` study around it measures real HTTP streams, so
the verdict's whole pipeline (screen, finalists, re-validation, calibrated test) runs end to end
with a true effect and a boot noise that the test knows."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from aiohttp import web

from servetune.engine.base import StartResult
from servetune.engine.bootfacts import BootFacts
from servetune.engine.config import Config
from servetune.engine.ports import free_port
from tests.fakes.counting_engine import CountingEngine
from tests.fakes.fake_stream_server import FakeServer


@contextmanager
def paced_server(ttft_ms: float, itl_ms: float) -> Iterator[tuple[str, FakeServer]]:
    """A fake streaming server on its own event-loop thread of this process; its pace is the
    FakeServer's `itl_ns`, read at every request."""
    fake = FakeServer(ttft_ms, itl_ms, 1, log=False)
    app = web.Application(middlewares=[fake.require_key])
    app.add_routes(fake.routes())
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    port = free_port()
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


class PacedEngine(CountingEngine):
    """Boots nothing: each start sets the shared fake server's ITL to `itl_ms * speed(config)` times
    exp(N(0, boot_sd)), the noise from `seed` in boot order."""

    def __init__(self, url: str, fake: FakeServer, *, itl_ms: float, slowdown: Callable[[Config], float],
                 boot_sd: float, seed: int):
        super().__init__(url, lambda config: BootFacts())
        self.fake = fake
        self.itl_ms = itl_ms
        self.slowdown = slowdown
        self.boot_sd = boot_sd
        self.rng = np.random.default_rng(seed)

    def start(self, config: Config, log_path: Path, port: int | None = None, on_spawn=None,
              launch_token: str | None = None, placement=None, cache=None) -> StartResult:
        factor = self.slowdown(config) * math.exp(self.boot_sd * float(self.rng.standard_normal()))
        self.fake.itl_ns = int(self.itl_ms * factor * 1e6)
        return super().start(config, log_path, port, on_spawn, launch_token, placement)
