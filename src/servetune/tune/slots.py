"""Slots: places where trials run at the same time, and the driver that alone writes the store.

A trial's work (boot, runs, teardown) runs on a slot; everything it reads from or writes to the
store, and every decision that needs the store (enough replicates? a duplicate?), is a call the
slot sends to the driver, which runs it in the driver's thread and sends back the answer. So one
thread holds the SQLite connection, the store sees one writer, and the runner's decisions are
made in one place, as with a single slot.

The calls a trial makes are named (`SlotCalls`: `enough`, `progress`, `duplicate_of`,
`fits_of`, and `store.METHOD`), so they can cross a process boundary as (name, arguments) and be
resolved by the driver on its own objects.

`SlotBackend` is what the runner needs of slots: `submit` one trial to a free slot, `stop`
everything at once (Ctrl-C, SIGTERM, an error in the driver), stop what an abandoned trial left
(`stop_leftovers`, where the trial ran) and, for a slot that was lost, a `replacement`.
`ThreadSlots` runs each trial in a thread of this process: a trial waits on a server's boot and
on HTTP, not on Python, and threads share the Server handles, so the driver (the main thread,
where signals arrive) can stop every slot's server itself. `tune/ray_slots.py` is the same
interface on a Ray cluster: one actor per slot, whose named calls reach this inbox through a
mailbox actor.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..engine.launch import Server, StopReport
from ..engine.placement import Placement

if TYPE_CHECKING:
    from ..store import StudyStore, Trial
    from .recovery import Leftovers
    from .trial import TrialExecutor, TrialPlan

# How often a waiting thread looks whether the study is stopping (not a timing of the study).
_POLL_S = 0.2


class SlotStopped(BaseException):
    """The study is stopping: a slot's call to the driver is refused, so its trial ends unrecorded
    (it stays `running` in the store and is resumed). A BaseException, like KeyboardInterrupt, so
    no `except Exception` on the way swallows it."""


class SlotLost(Exception):
    """A slot's worker or node went away mid-trial (a Ray actor killed, a node lost): the trial
    is not over, it runs again on another slot; its recorded runs count."""


@dataclass(frozen=True)
class SlotCalls:
    """What a trial on a slot asks the driver, by name (the driver's side of `TrialExecutor.run`'s
    callbacks); `duplicate_of` is None for a role that is never a duplicate."""

    enough: Callable[..., Any]
    progress: Callable[..., Any]
    fits_of: Callable[..., Any]
    duplicate_of: Callable[..., Any] | None = None
    race: Callable[..., Any] = lambda _trial, _replicates: None   # tune/racing.py: why to stop now, or None


def resolve_call(calls: SlotCalls, store: StudyStore, name: str) -> Callable[..., Any]:
    """The driver's callable for a slot's call `name`: a SlotCalls field or `store.METHOD`.
    Only these names resolve: a message cannot reach anything else of the driver."""
    if name.startswith("store."):
        attr = getattr(store, name.removeprefix("store."), None)
    else:
        attr = getattr(calls, name, None) if name in SlotCalls.__dataclass_fields__ else None
    if not callable(attr) or name.startswith(("store._", "_")):
        raise ValueError(f"slot call {name!r}: no such call")
    return cast("Callable[..., Any]", attr)  # getattr's Any, known callable here


@dataclass(frozen=True)
class Finished:
    """A slot is done with a trial: its outcome, or what ended the work."""

    slot: int
    trial_id: int
    outcome: str | None = None
    error: BaseException | None = None


class Driver:
    """The driver's inbox. Slots `call` (and wait) or `post` (and go on); the driver thread
    `serve`s until a slot reports a finished trial."""

    def __init__(self) -> None:
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._closed = threading.Event()

    # --- slot side ----------------------------------------------------------------------

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` run by the driver; its result or exception. SlotStopped once closed."""
        if self._closed.is_set():
            raise SlotStopped
        future = self.submit(fn, *args, **kwargs)
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except TimeoutError:
                if self._closed.is_set():
                    raise SlotStopped from None

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """`fn(*args, **kwargs)` to be run by the driver, without waiting: its future."""
        future: Future[Any] = Future()
        self._inbox.put((fn, args, kwargs, future))
        return future

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """`fn(*args)` run by the driver when it gets to it (progress display); dropped once closed."""
        if not self._closed.is_set():
            self._inbox.put((fn, args, {}, None))

    def finished(self, message: Finished) -> None:
        self._inbox.put(message)

    # --- driver side --------------------------------------------------------------------

    def serve(self) -> Finished:
        """Run the slots' calls until one reports a finished trial, and return that report."""
        while True:
            try:
                message = self._inbox.get(timeout=_POLL_S)  # a timeout keeps Ctrl-C deliverable
            except queue.Empty:
                continue
            if isinstance(message, Finished):
                return message
            fn, args, kwargs, future = message
            if future is None:
                fn(*args)
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except Exception as exc:  # the slot's trial gets it where it made the call
                future.set_exception(exc)

    def close(self) -> None:
        """No more calls: waiting slots get SlotStopped."""
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


class DriverProxy:
    """Another object (the store) whose method calls a slot makes are run by the driver."""

    def __init__(self, driver: Driver, target: object):
        self._driver = driver
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: self._driver.call(attr, *args, **kwargs)


class LiveServers:
    """The servers slots have running now, so the driver can stop them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[int, Server] = {}

    def add(self, server: Server) -> None:
        with self._lock:
            self._servers[id(server)] = server

    def discard(self, server: Server) -> None:
        with self._lock:
            self._servers.pop(id(server), None)

    def all(self) -> list[Server]:
        with self._lock:
            return list(self._servers.values())


class SlotBackend(Protocol):
    placements: list[Placement]

    def submit(self, slot: int, trial: Trial, plan: TrialPlan, calls: SlotCalls) -> None:
        """Run `trial` on `slot`; its calls go to the driver, which hears of its end (`Finished`)."""
        ...

    def stop(self) -> None:
        """Stop every slot's server now and give up their trials (they stay `running`)."""
        ...

    def stop_leftovers(self, trial: Trial, leftovers: Leftovers) -> bool:
        """Stop what an abandoned trial left running (`leftovers`), where it ran; True when something was."""
        ...

    def replacement(self, lost: int) -> Placement:
        """A new slot in place of `lost` (its worker or node is gone), with a new index, appended to
        `placements`: it measures its own baseline, since it may be another node. Raises SlotLost when there is none."""
        ...


class ThreadSlots:
    """Slots as threads of this process (see the module docstring for why)."""

    def __init__(self, driver: Driver, placements: list[Placement], live: LiveServers,
                 executor: TrialExecutor, store: StudyStore, join_s: float = 30.0):
        self.driver = driver
        self.placements = placements
        self.live = live
        self._stop_server: Callable[[Server], StopReport] = executor.engine.stop
        self._join_s = join_s
        self._threads: dict[int, threading.Thread] = {}
        proxy = DriverProxy(driver, store)  # a slot's store calls run in the driver's thread
        # A single slot on the host as it is: no placement, today's launch.
        single = len(placements) == 1 and not placements[0].env
        self._executors = {p.slot: executor.on_slot(proxy, None if single else p, live=live)  # type: ignore[arg-type]
                           for p in placements}

    def submit(self, slot: int, trial: Trial, plan: TrialPlan, calls: SlotCalls) -> None:
        executor, driver = self._executors[slot], self.driver

        def run() -> None:
            try:
                outcome = executor.run_calling(
                    trial, plan, call=lambda name, *a: driver.call(getattr(calls, name), *a),
                    post=lambda name, *a: driver.post(getattr(calls, name), *a),
                    duplicates=calls.duplicate_of is not None)
                self.driver.finished(Finished(slot, trial.id, outcome=outcome))
            except BaseException as exc:  # reported to the driver, which decides
                self.driver.finished(Finished(slot, trial.id, error=exc))

        thread = threading.Thread(target=run, name=f"servetune-slot-{slot}", daemon=True)
        self._threads[slot] = thread
        thread.start()

    def stop_leftovers(self, trial: Trial, leftovers: Leftovers) -> bool:
        return leftovers.stop()  # every trial of this backend ran on this host

    def replacement(self, lost: int) -> Placement:
        raise SlotLost(f"slot {lost} of this host cannot be replaced")

    def stop(self) -> None:
        self.driver.close()
        # From the driver's thread: a slot may be deep in a boot or a run; its own teardown
        # follows once it notices, and stopping a stopped server again is harmless.
        for server in self.live.all():
            self._stop_server(server)
        for thread in self._threads.values():
            thread.join(self._join_s)
        for server in self.live.all():  # spawned while the others were being stopped
            self._stop_server(server)
