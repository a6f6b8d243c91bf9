"""The streaming HTTP client: sends prepared requests on a schedule and records raw chunks.

Hot path: one `perf_counter_ns()` and one list append per socket read, in the connection's
protocol (`_StampingHandler`); the task that sent a request wakes only when its response has
ended. Bodies are serialized before the run and responses are parsed after it
(`parse_stream`), so JSON work never delays the stamp of another stream's chunk. An SSE event
is stamped with the time of the read that completed it, as `vllm bench serve` stamps when it
parses that read.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, TypeVar, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader
from yarl import URL

from .. import server_http
from .records import STOPPED_EARLY, RequestRecord

# A response is read once, at its end (see _StampingHandler), so the body buffer must hold a
# whole one without pausing the socket: 256 MiB is ~700k streamed tokens with usage stats.
READ_BUFSIZE = 1 << 28
T = TypeVar("T")
LAG_TICK_S = 0.01
PREWARM_UNCAPPED = 64  # connections opened ahead of an open loop without a concurrency cap
# Error classes of requests the client ended itself, named as the run outcomes they lead to.
STALLED = "stalled"
# A server that took the run's first requests connects at once; a longer wait means it is gone.
CONNECT_TIMEOUT_S = 10.0
RUN_TIMEOUT = "run_timeout"
_JSON = {"Content-Type": "application/json"}


@dataclass
class Job:
    """A request ready to send. `offset_ns` from the run's start; None in a closed loop."""

    index: int
    input_len: int
    output_len: int
    body: bytes
    warmup: bool = False
    offset_ns: int | None = None
    # A session's later turn: sent `gap_ns` after the answer to the job of index `follows`
    # ends, and not before its own offset.
    follows: int | None = None
    gap_ns: int = 0
    traffic_class: str | None = None


@dataclass
class Raw:
    """What the hot path keeps of one response."""

    times: list[int] = field(default_factory=list)  # arrival of each read
    chunks: list[bytes] = field(default_factory=list)  # the body, in the pieces it was buffered in
    read_ends: list[int] = field(default_factory=list)  # or: the body's length after each read
    status: int = 0
    error: str | None = None
    cancelled: bool = False  # still in flight when the run was ended


@dataclass
class DriveResult:
    records: list[RequestRecord]
    schedule_delay_ns: list[int]
    loop_lag_ns: list[int]
    cap_waits: int                     # open loop: requests that waited for a concurrency slot
    first_dispatch_ns: int | None
    last_dispatch_ns: int | None
    cpu_busy: float                    # this process's CPU seconds / wall seconds
    stalled: int = 0                   # requests that got no data for the stall timeout
    timed_out: bool = False            # the run's deadline passed; what was in flight was cancelled
    stopped_early: bool = False        # `should_stop` ended the run; what was in flight was cancelled


@dataclass(frozen=True)
class Finished:
    """What `drive`'s `should_stop` hook sees each time a request ends: that request, parsed
    (a copy), and the state of the run at that instant."""

    record: RequestRecord
    started: int       # requests the schedule has released so far (sent or waiting for a cap slot)
    finished: int      # requests ended so far, this one included
    now_ns: int        # perf_counter_ns

    @property
    def in_system(self) -> int:
        """Requests released and not yet ended: what grows without bound on an overloaded server."""
        return self.started - self.finished


ShouldStop = Callable[[Finished], bool]


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop where installed (vLLM brings it): cheaper per chunk and per send."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def request_body(endpoint: str, model: str, prompt: str, max_tokens: int, ignore_eos: bool,
                 temperature: float | None = None) -> bytes:
    """The JSON body `vllm bench serve` sends, plus continuous usage stats (per-chunk token counts);
    `temperature` only when given (None: the server's default sampling)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
        body["repetition_penalty"] = 1.0
    if ignore_eos:
        body["ignore_eos"] = True
    if temperature is not None:
        body["temperature"] = temperature
    return json.dumps(body, separators=(",", ":")).encode()


def endpoint_path(endpoint: str) -> str:
    return "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"


# perf_counter_ns of the latest socket read of any stream in this process: what a live display
# shows as "no data for N s" (one store per read; a list, so the hot path needs no `global`).
_LAST_READ_NS = [0]


def last_read_ns() -> int:
    """When this process last read stream data (perf_counter_ns; 0: never)."""
    return _LAST_READ_NS[0]


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, noting when each socket read arrives and how far it
    filled the response body: `(perf_counter_ns, body bytes so far)`, in the event loop's I/O
    phase, before any task runs. The reading task then sleeps until the response ends instead
    of waking per chunk: with 256 streams' chunks arriving at once, a task switch per chunk
    made each loop pass ~256 x 10 us long and every stamp after the first that much late."""

    __slots__ = ("_marked", "_sizes", "_times")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._marked: StreamReader | None = None
        # two int lists, not a list of tuples: ints are not tracked by the garbage collector
        self._times: list[int] = []
        self._sizes: list[int] = []

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        super().data_received(data)
        if not data:  # aiohttp's own call when its reader is drained, not a socket read
            return
        body: StreamReader | None = getattr(self, "_payload", None)  # this response's body; kept after it ends
        if body is None:
            return
        size = body.total_bytes
        if body is not self._marked:
            self._marked, self._times, self._sizes = body, [], []
        self._times.append(now)
        self._sizes.append(size)
        _LAST_READ_NS[0] = now

    def marks_for(self, body: StreamReader) -> tuple[list[int], list[int]]:
        """(arrival, body bytes so far) of each read of `body`; empty when another response
        has taken over the connection since."""
        return (self._times, self._sizes) if body is self._marked else ([], [])


def make_session(concurrency: int, api_key: str | None = None,
                 stall_timeout_s: float | None = None) -> aiohttp.ClientSession:
    """The streaming session: `stall_timeout_s` bounds every wait for the next read of a
    response (headers included); the run's deadline (`drive`) bounds the whole."""
    # limit 0 = unbounded; otherwise the pool never makes a request wait for a connection.
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60, force_close=False)
    # aiohttp has no public hook for the protocol class; without one `send` stamps in the task.
    if hasattr(connector, "_factory"):
        # (typeshed's partial is invariant: a factory of the subclass is still one of ResponseHandler)
        connector._factory = cast("functools.partial[ResponseHandler]",
                                  functools.partial(_StampingHandler, loop=asyncio.get_running_loop()))
    return server_http.session(
        api_key, aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=stall_timeout_s),
        connector=connector, read_bufsize=READ_BUFSIZE, auto_decompress=False,
    )


async def prewarm(session: aiohttp.ClientSession, url: str, n: int) -> None:
    """Open n pooled connections (concurrent GETs of /v1/models), so the measured phase does
    not pay n TCP handshakes while the first chunks arrive."""
    origin = str(URL(url).origin())

    async def one() -> None:
        try:
            async with session.get(origin + "/v1/models") as resp:
                await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError):
            pass  # a dead server shows up as failed requests

    await asyncio.gather(*(one() for _ in range(n)))


async def send(session: aiohttp.ClientSession, url: str, body: bytes, hdrs: dict[str, str], rec: RequestRecord,
               raw: Raw) -> None:
    """Stream one response into `raw`; stamps dispatch and end on `rec`. A read that waits
    longer than the session's `sock_read` ends the request as stalled."""
    times, chunks = raw.times, raw.chunks
    clock = time.perf_counter_ns
    rec.dispatch_ns = clock()
    try:
        async with session.post(url, data=body, headers=hdrs) as resp:
            raw.status = resp.status
            if resp.status != 200:
                text = (await resp.read())[:300].decode(errors="replace")
                raw.error = f"HTTP {resp.status}: {text}"
                return
            content = resp.content
            proto = resp.connection.protocol if resp.connection is not None else None
            if isinstance(proto, _StampingHandler):
                await content.wait_eof()
                # The buffered pieces as they are: reading them through the reader costs aiohttp
                # ~3 us per piece, too much while other streams' last chunks are arriving.
                buffered = getattr(content, "_buffer", None)
                raw.chunks = list(buffered) if buffered is not None else [content.read_nowait(-1)]
                raw.times, raw.read_ends = proto.marks_for(content)
                size = content.total_bytes
                if size and not raw.read_ends:  # never stamped: fail loudly, not TTFT = E2EL
                    raw.error = "no socket read of this response was stamped (has aiohttp's ResponseHandler changed?)"
                elif raw.read_ends and raw.read_ends[-1] < size:  # bytes no read stamped: not expected
                    raw.times, raw.read_ends = [*raw.times, clock()], [*raw.read_ends, size]
                return
            while True:  # the response is complete already, or the protocol is not ours
                data = await content.readany()
                if not data:
                    break
                times.append(clock())
                chunks.append(data)
    except aiohttp.SocketTimeoutError:
        raw.error = f"{STALLED}: no data for {session.timeout.sock_read:g} s (stall_timeout_s)"
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raw.error = f"{type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        raw.cancelled = True
        raise
    finally:
        rec.end_ns = clock()


def parse_stream(rec: RequestRecord, raw: Raw) -> RequestRecord:
    """Fill token times and counts from the raw SSE bytes (after the run)."""
    rec.error = raw.error
    if raw.cancelled and rec.error is None:
        rec.error = f"{RUN_TIMEOUT}: cancelled when the run's deadline passed (run_timeout_s)"
    if rec.error is not None:
        return rec
    data = b"".join(raw.chunks)
    ends = raw.read_ends or list(accumulate(len(c) for c in raw.chunks))
    prev_completion = 0
    pos = 0
    done = False
    saw_usage_per_chunk = True
    while True:
        if pos >= len(data):
            break
        cut = data.find(b"\n\n", pos)
        if cut < 0:  # an unterminated last event still counts
            event, t_ns, pos = data[pos:].strip(), raw.times[-1], len(data)
        else:
            event, t_ns = data[pos:cut].strip(), raw.times[bisect_left(ends, cut + 2)]
            pos = cut + 2
        if not event or event.startswith(b":"):
            continue
        payload = event[5:].strip() if event.startswith(b"data:") else event
        if payload == b"[DONE]":
            done = True
            continue
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            rec.error = f"unparsable event: {payload[:120]!r}"
            return rec
        if "error" in obj and not obj.get("choices"):
            rec.error = f"server error: {json.dumps(obj['error'])[:300]}"
            return rec
        usage = obj.get("usage")
        if usage:
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
        if obj.get("choices"):
            if rec.first_token_ns is None:
                rec.first_token_ns = t_ns
            rec.chunk_ns.append(t_ns)
            if usage and usage.get("completion_tokens") is not None:
                rec.chunk_tokens.append(usage["completion_tokens"] - prev_completion)
                prev_completion = usage["completion_tokens"]
            else:
                saw_usage_per_chunk = False
                rec.chunk_tokens.append(1)
        elif usage:
            rec.output_tokens = usage.get("completion_tokens")
    if rec.output_tokens is None and saw_usage_per_chunk and rec.chunk_tokens:
        rec.output_tokens = prev_completion
    if not rec.chunk_ns:
        rec.error = "no token chunk in the response"
    elif not done:
        rec.error = "stream ended without [DONE]"
    return rec


class _LagMonitor:
    """Event-loop lag: how late a 10 ms sleep wakes up."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        tick = int(LAG_TICK_S * 1e9)
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(LAG_TICK_S)
            self.samples.append(max(time.perf_counter_ns() - t - tick, 0))

    def __enter__(self) -> _LagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def _sleep_until(target_ns: int) -> None:
    # Loop: timers may fire up to a clock tick early, and no request leaves early.
    while (wait := target_ns - time.perf_counter_ns()) > 0:
        await asyncio.sleep(wait / 1e9)


@dataclass
class _Sender:
    """The requests of one `drive`: released on their schedule (a closed loop, or an open one at
    their offsets), each sent, and what each left kept in release order for `result`."""

    sess: aiohttp.ClientSession
    url: str
    jobs: list[Job]
    concurrency: int | None
    start_ns: int
    deadline_ns: int | None
    on_done: Callable[[], None] | None
    should_stop: ShouldStop | None
    pairs: list[tuple[RequestRecord, Raw]] = field(default_factory=list, init=False)
    delays: list[int] = field(default_factory=list, init=False)
    cap_waits: int = field(default=0, init=False)
    n_finished: int = field(default=0, init=False)
    stop: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # a session turn's index -> when its answer ended (-1: never sent)
    answered: dict[int, asyncio.Future[int]] = field(default_factory=dict, init=False)

    def _too_late(self, now_ns: int) -> bool:
        return self.deadline_ns is not None and now_ns > self.deadline_ns

    def _new_record(self, job: Job, scheduled: int) -> tuple[RequestRecord, Raw]:
        rec = RequestRecord(index=job.index, warmup=job.warmup, input_len=job.input_len,
                            output_len=job.output_len, scheduled_ns=scheduled, traffic_class=job.traffic_class)
        pair = (rec, Raw())
        self.pairs.append(pair)
        return pair

    def _done(self, rec: RequestRecord, raw: Raw, ready_ns: int) -> None:
        """A request ended: its schedule delay (from when it could leave), `should_stop`, `on_done`."""
        self.delays.append(rec.dispatch_ns - ready_ns)
        self.n_finished += 1
        if self.should_stop is not None and not self.stop.is_set():
            event = Finished(parse_stream(rec.model_copy(deep=True), raw), len(self.pairs), self.n_finished,
                             time.perf_counter_ns())
            if self.should_stop(event):
                self.stop.set()
        if self.on_done:
            self.on_done()

    async def _closed_slot(self, it: Iterator[Job]) -> None:
        """One user of a closed loop: the next job as soon as the last one's answer ended."""
        for job in it:
            now = time.perf_counter_ns()
            if self._too_late(now):
                return
            rec, raw = self._new_record(job, now)
            await send(self.sess, self.url, job.body, _JSON, rec, raw)
            self._done(rec, raw, now)

    async def _send_closed(self) -> None:
        await asyncio.sleep(max(self.start_ns - time.perf_counter_ns(), 0) / 1e9)
        it = iter(self.jobs)
        await asyncio.gather(*(self._closed_slot(it) for _ in range(min(self.concurrency or 1, len(self.jobs)))))

    async def _open_one(self, job: Job, target: int, sem: asyncio.Semaphore | None) -> None:
        """One job of an open loop, released at `target`: sent once a concurrency slot is free."""
        rec, raw = self._new_record(job, target)
        ready = target
        if sem is not None:
            if sem.locked():
                self.cap_waits += 1
                await sem.acquire()
                ready = time.perf_counter_ns()
            else:
                await sem.acquire()
        try:
            await send(self.sess, self.url, job.body, _JSON, rec, raw)
        finally:
            if sem is not None:
                sem.release()
            self._end_turn(job.index, rec.end_ns or time.perf_counter_ns())
        self._done(rec, raw, ready)

    async def _next_turn(self, job: Job, target: int, sem: asyncio.Semaphore | None) -> None:
        """A session's later turn: sent `gap_ns` after the answer it follows ended, not before `target`."""
        assert job.follows is not None
        previous_end = await self.answered[job.follows]
        if previous_end >= 0:  # else the previous turn was never sent (the run's deadline): nor is this one
            target = max(target, previous_end + job.gap_ns)
            await _sleep_until(target)
            if not self._too_late(time.perf_counter_ns()):
                await self._open_one(job, target, sem)
                return
        self._end_turn(job.index, -1)

    def _expect_turns(self) -> None:
        """A future for each job that a later turn of its session follows."""
        loop = asyncio.get_running_loop()
        indices = {job.index for job in self.jobs}
        for job in self.jobs:
            if job.follows in indices:
                self.answered.setdefault(job.follows, loop.create_future())

    def _end_turn(self, index: int, end_ns: int) -> None:
        turn = self.answered.get(index)
        if turn is not None and not turn.done():
            turn.set_result(end_ns)

    async def _release(self, sem: asyncio.Semaphore | None, tasks: list[asyncio.Task[None]]) -> set[int]:
        """Start each job's task at its offset, until the deadline (into `tasks`); the indices started."""
        released: set[int] = set()
        for job in self.jobs:
            target = self.start_ns + (job.offset_ns or 0)
            await _sleep_until(target)
            if self._too_late(time.perf_counter_ns()):
                break
            one = self._next_turn if job.follows in self.answered else self._open_one
            tasks.append(asyncio.create_task(one(job, target, sem)))
            released.add(job.index)
        return released

    async def _send_open(self) -> None:
        sem = asyncio.Semaphore(self.concurrency) if self.concurrency else None
        tasks: list[asyncio.Task[None]] = []
        self._expect_turns()
        try:
            released = await self._release(sem, tasks)
            for index in self.answered.keys() - released:  # turns never released: their sessions end here
                self._end_turn(index, -1)
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Ended while still releasing requests: the ones released must not outlive the run.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _send_all(self) -> None:
        if self.jobs and self.jobs[0].offset_ns is None:
            await self._send_closed()
        else:
            await self._send_open()

    async def send_until_stopped(self) -> None:
        """Send every job, unless `should_stop` says stop first: then what is in flight is cancelled."""
        if self.should_stop is None:
            await self._send_all()
            return
        main = asyncio.ensure_future(self._send_all())
        stopper = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not main.done():
                main.cancel()
                await asyncio.gather(main, return_exceptions=True)
        if not self.stop.is_set():
            main.result()

    def result(self, loop_lag_ns: list[int], cpu_busy: float, timed_out: bool) -> DriveResult:
        """The records, parsed now that no stream is being read; those a stop cut short say so."""
        records = [parse_stream(rec, raw) for rec, raw in self.pairs]
        if self.stop.is_set():
            for rec, raw in self.pairs:
                if raw.cancelled or not rec.dispatch_ns:
                    rec.error = f"{STOPPED_EARLY}: in flight when the run was stopped early (should_stop)"
        dispatches = [r.dispatch_ns for r in records if r.dispatch_ns]
        return DriveResult(
            records=records, schedule_delay_ns=self.delays, loop_lag_ns=loop_lag_ns, cap_waits=self.cap_waits,
            first_dispatch_ns=min(dispatches, default=None), last_dispatch_ns=max(dispatches, default=None),
            cpu_busy=cpu_busy,
            stalled=sum(1 for r in records if (r.error or "").startswith(STALLED)), timed_out=timed_out,
            stopped_early=self.stop.is_set(),
        )


class _CpuMeter:
    """This process's CPU seconds per wall second, from when it is made."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self._cpu0, self._wall0 = self._proc.cpu_times(), time.perf_counter_ns()

    def busy(self) -> float:
        cpu1, wall1 = self._proc.cpu_times(), time.perf_counter_ns()
        cpu_s = (cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)
        busy = cpu_s / max((wall1 - self._wall0) / 1e9, 1e-9)
        return busy if math.isfinite(busy) else 0.0


async def _until(end_by_ns: int | None, sending: Callable[[], Coroutine[Any, Any, None]]) -> tuple[list[int], bool]:
    """Await `sending()` until it ends or `end_by_ns` passes (what is in flight then cancelled):
    the event loop's lag meanwhile, and whether the deadline ended it."""
    timed_out = False
    # A full collection walks every object the process holds (its imports, the run's prepared
    # jobs): 150 ms with a trace's 5,000 records, in which no request leaves. Frozen, the
    # collector walks only what the run itself allocates.
    gc.freeze()
    try:
        with _LagMonitor() as lag:
            try:
                # wait_for cancels what is in flight (gather passes the cancel on to each send)
                await asyncio.wait_for(sending(),
                                       None if end_by_ns is None else max(end_by_ns - time.perf_counter_ns(), 0) / 1e9)
            except TimeoutError:
                timed_out = True
    finally:
        gc.unfreeze()
    return lag.samples, timed_out


async def drive(
    url: str,
    jobs: list[Job],
    *,
    concurrency: int | None,
    start_ns: int,
    deadline_ns: int | None = None,
    end_by_ns: int | None = None,
    on_done: Callable[[], None] | None = None,
    session: aiohttp.ClientSession | None = None,
    api_key: str | None = None,
    stall_timeout_s: float | None = None,
    should_stop: ShouldStop | None = None,
) -> DriveResult:
    """Send `jobs` (closed loop when their offsets are None) and return parsed records.

    `start_ns` is the schedule's origin (perf_counter_ns, system-wide on Linux, so worker
    processes share it); no request starts after `deadline_ns`; at `end_by_ns` (the run's
    deadline) requests in flight are cancelled and recorded as failed. `api_key` and
    `stall_timeout_s` configure the session made here (none is passed). `should_stop`, when
    given, is called as each request ends (its response parsed on a copy, so the hot path of
    other streams pays only for runs that ask); when it returns True no further request starts,
    those in flight are cancelled and recorded as failed (`stopped_early`).
    """
    own_session = session is None
    sess = session or make_session(concurrency or len(jobs), api_key, stall_timeout_s)
    if own_session and jobs:
        await prewarm(sess, url, min(concurrency or PREWARM_UNCAPPED, len(jobs)))
    sender = _Sender(sess, url, jobs, concurrency, start_ns, deadline_ns, on_done, should_stop)
    cpu = _CpuMeter()
    try:
        loop_lag_ns, timed_out = await _until(end_by_ns, sender.send_until_stopped)
    finally:
        if own_session:
            await sess.close()
    return sender.result(loop_lag_ns, cpu.busy(), timed_out)
