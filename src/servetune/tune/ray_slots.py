"""Slots on a Ray cluster (`servetune tune STUDY --ray auto|ADDRESS`).

Each slot is one Ray actor (`_SlotActor`) that holds the slot's resources for the whole study:
the GPUs the largest server of the study takes (`slot_gpus`) and one CPU; the slots are spread
over the cluster's nodes. It boots every trial's server on its node with the GPU ids Ray assigned
(they become the slot's `Placement`, with the host's name and address, Ray's node id and the
worker's pid in `Placement.where`; none of it enters `Config.key()`), and runs the load generator
on that same node, next to the server. It never opens the store: every call a trial makes to the
driver (`SlotCalls` by name, and `store.METHOD`) goes as (slot, trial id, name, arguments) to a
mailbox actor on the driver's node, which the driver's pump thread empties into the driver's
inbox (tune/slots.py); the driver, the only writer of the SQLite store, runs it (when the trial
is still that slot's) and the answer goes back the same way. Runs are recorded one by one as
they end, so a lost slot loses at most the run in flight.

A slot is lost when its actor dies or goes out of reach (its worker process killed, its node's
raylet dead, its node gone): the actor is killed for good and nothing it still sends counts; the
driver stops what the trial's server left on that host (by a live node of the host, found by
the trial's launch token: a raylet that died leaves its host and the server running), reopens
the trial and gives it to the next free slot, and starts a replacement actor under a new slot
index, which measures its own baseline first (it may be on another node). The trial's runs
already recorded are kept and never measured again.

Ownership: the actors and the mailbox are not detached; Ray ties them to the driver's job, so
when the tuner dies (even by SIGKILL) Ray kills them, and a slot that outlives the mailbox for a
moment gets an error on its next call and ends its trial without recording (the driver alone
writes, so nothing a dead tuner started can still write to the store). A trial's server runs in
its own process group and may outlive its actor: `servetune tune` run again finds the trial
`running` in the store and stops the server on the node recorded in its placement (by its launch
token), then runs the trial again. With `--ray auto` and no cluster running, Ray starts one for
this study; its processes share the tuner's fate and stop with it.

Secrets named by variable (`engine.secret_env`) are read from the environment of the node's Ray
worker, never sent through Ray: set them where `ray start` runs. A secret's value written in the
study file itself travels inside the engine object the actors are built with (Ray's memory,
never a log or the store).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, cast

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..engine.config import Config
from ..engine.placement import _GPU_FLAGS, Placement, plan_placements, server_gpus
from ..engine.registry import cpu_bind_variables
from ..errors import ServetuneError
from ..store import StudyStore, Trial
from ..study.spec import StudySpec
from ..vocabulary import Outcome
from .recovery import Leftovers
from .slots import Driver, Finished, LiveServers, SlotCalls, SlotLost, SlotStopped, resolve_call
from .trial import TrialExecutor, TrialPlan

# Ray's label of every node: its id (what a scheduling preference names a node by).
_NODE_ID_LABEL = "ray.io/node-id"
# How often a waiting side looks again (a mailbox take, a slot's wait for an answer); not a timing
# of the study.
_POLL_S = 0.2
# A slot's progress reports (one per finished request) are sent at most this often.
_PROGRESS_EVERY_S = 0.5
# How long a slot may wait for the cluster to give it its resources before the study says so.
READY_TIMEOUT_S = 180.0
# How long stopping may wait for a slot to stop its server itself before its actor is killed.
STOP_TIMEOUT_S = 60.0


@contextmanager
def ray_cluster(address: str) -> Iterator[None]:
    """Connected to the Ray cluster at `address` for the block. `auto`: RAY_ADDRESS or a cluster
    started on this machine with `ray start`, else a new local one for this study (stopped at
    the end, with the tuner)."""
    # A cluster this study starts reports no usage statistics (Ray's default would try to, over
    # the network); a cluster started with `ray start` keeps its own setting.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(address=None if address == "auto" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServetuneError(f"--ray {address}: cannot connect to a Ray cluster: {first}") from None
    try:
        yield
    finally:
        ray.shutdown()


def slot_gpus(spec: StudySpec) -> int:
    """GPUs one slot asks Ray for: `parallel.gpus_per_trial`, or the most any config of the study
    can take (the largest tensor x pipeline x data parallel sizes of the baseline and the space)
    when larger. A study without those flags and without gpus_per_trial asks for none (CPU)."""
    flags = dict(spec.baseline_config().flags)
    mentioned = any(f in flags for f in _GPU_FLAGS)
    for flag in _GPU_FLAGS:
        param = spec.space.get(flag)
        if param is None or not param.enumerable(flag):
            continue
        mentioned = True
        whole = [int(v) for v in param.enumerate(flag) if isinstance(v, (int, str)) and str(v).isdigit()]
        current = flags.get(flag)
        flags[flag] = max([*whole, int(str(current)) if str(current).isdigit() else 1])
    largest = server_gpus(Config.of(flags)) if mentioned else 0
    return max(spec.parallel.gpus_per_trial, largest)


class _Mailbox:
    """The slots' calls to the driver, held until the driver's pump takes them (an async actor:
    each waiting `call` is a coroutine, so any number of slots can wait at once)."""

    def __init__(self) -> None:
        self._pending: asyncio.Queue[Any] | None = None
        self._waiting: dict[int, asyncio.Future[tuple[bool, Any]]] = {}
        self._next = 0

    def _queue(self) -> asyncio.Queue[Any]:
        if self._pending is None:  # made on the actor's event loop
            self._pending = asyncio.Queue()
        return self._pending

    async def call(self, message: tuple[Any, ...]) -> tuple[bool, Any]:
        self._next += 1
        number = self._next
        answer: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        await self._queue().put((number, message))
        return await answer

    async def post(self, message: tuple[Any, ...]) -> None:
        await self._queue().put((None, message))

    async def take(self, wait_s: float) -> list[tuple[int | None, tuple[Any, ...]]]:
        queue = self._queue()
        try:
            first = await asyncio.wait_for(queue.get(), wait_s)
        except TimeoutError:
            return []
        out = [first]
        while not queue.empty():
            out.append(queue.get_nowait())
        return out

    async def reply(self, number: int, ok: bool, value: Any) -> None:
        answer = self._waiting.pop(number, None)
        if answer is not None and not answer.done():
            answer.set_result((ok, value))


class _RemoteStore:
    """The store as a slot in another process sees it: each method call is a call to the driver."""

    def __init__(self, call: Callable[..., Any]):
        self._call = call

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self._call(f"store.{name}", *args, **kwargs)


class _SlotActor:
    """One slot on a node of the cluster: boots, measures and stops one trial at a time."""

    def __init__(self, executor: TrialExecutor, mailbox: Any, cwd: str):
        # Relative paths of the study (the model, the engine command's files, --out) mean what
        # they mean to the tuner: its directory, where the node has it (one host, a shared mount).
        if os.path.isdir(cwd):
            os.chdir(cwd)
        self._template = executor
        self._mailbox = mailbox
        self._live = LiveServers()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._trial_id = 0
        self._last_progress = 0.0
        ids = [str(i) for i in ray.get_gpu_ids()]
        context = ray.get_runtime_context()
        host, ip = socket.gethostname(), _node_ip()
        self._placement = Placement(
            -1, {"CUDA_VISIBLE_DEVICES": ",".join(ids)} if ids else {},
            cpus=tuple(sorted(os.sched_getaffinity(0))),  # what the driver splits between CPU slots of a node
            where={"node": f"{host} ({ip})", "ray_node_id": context.get_node_id(), "node_ip": ip,
                   "worker_pid": str(os.getpid())})
        self._executor = executor

    def where(self) -> Placement:
        """Where Ray put this slot (its index not chosen yet)."""
        return self._placement

    def assign(self, slot: int, env: dict[str, str], cpus: tuple[int, ...] | None) -> Placement:
        """Become slot `slot` (its port is the study port + the index) with the driver's share of
        the node's CPUs (None: no pinning) and what goes with it into the server's environment."""
        self._placement = dataclasses.replace(self._placement, slot=slot, env={**self._placement.env, **env},
                                              cpus=cpus)
        self._executor = self._template.on_slot(_RemoteStore(self._call), self._placement,  # type: ignore[arg-type]
                                                live=self._live)
        return self._placement

    def run(self, trial: Trial, plan: TrialPlan, duplicates: bool) -> Outcome | None:
        """The trial to its end; None when the study stopped it (it stays `running`, to be resumed)."""
        self._idle.clear()
        self._trial_id = trial.id
        try:
            return self._executor.run_calling(trial, plan, call=self._call, post=self._post, duplicates=duplicates)
        except SlotStopped:
            return None
        finally:
            self._idle.set()

    def stop_servers(self, wait_s: float) -> None:
        """Stop the slot's server now (Ctrl-C, SIGTERM or an error in the driver); the trial in
        flight notices and ends unrecorded. One spawned meanwhile is stopped after it ends."""
        self._stopping.set()
        for server in self._live.all():
            self._executor.engine.stop(server)
        self._idle.wait(wait_s)
        for server in self._live.all():
            self._executor.engine.stop(server)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._stopping.is_set():
            raise SlotStopped
        pending = self._mailbox.call.remote((self._placement.slot, self._trial_id, name, args, kwargs))
        while True:
            try:
                ok, value = ray.get(pending, timeout=_POLL_S)
                break
            except GetTimeoutError:
                if self._stopping.is_set():
                    raise SlotStopped from None
            except RayError:  # the mailbox died with the driver: nothing may be recorded any more
                raise SlotStopped from None
        if not ok:
            raise value
        return value

    def _post(self, name: str, *args: Any) -> None:
        """Progress, fire and forget; at most every _PROGRESS_EVERY_S but for a boot's start."""
        now = time.monotonic()
        booting = len(args) > 1 and args[1] is None
        if not booting and now - self._last_progress < _PROGRESS_EVERY_S:
            return
        self._last_progress = now
        self._mailbox.post.remote((self._placement.slot, self._trial_id, name, args, {}))


def _stop_leftovers_on_node(leftovers: Leftovers) -> bool:
    return leftovers.stop()


class RaySlots:
    """`SlotBackend` on a Ray cluster (see the module docstring)."""

    def __init__(self, driver: Driver, executor: TrialExecutor, store: StudyStore, *, slots: int, gpus: int,
                 cpus: float = 1.0, ready_timeout_s: float = READY_TIMEOUT_S, bind_env: tuple[str, ...] = ()):
        self.driver = driver
        self.placements: list[Placement] = []
        self._store = store
        self._gpus, self._cpus, self._ready_timeout_s = gpus, cpus, ready_timeout_s
        self._bind_env = bind_env  # the study's engines' CPU-binding variables, set with a slot's share of a node
        # Without the store and the live servers of this process: what travels to the actors.
        self._template = executor.on_slot(None, None, live=None)  # type: ignore[arg-type]
        # On the driver's own node: a node that dies must not take the study's mailbox with it.
        self._mailbox: Any = ray.remote(_Mailbox).options(
            num_cpus=0, scheduling_strategy=_pinned(ray.get_runtime_context().get_node_id())).remote()
        self._actor_class = ray.remote(_SlotActor)
        self._stop_task = ray.remote(_stop_leftovers_on_node)
        self._actors: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._running: dict[Any, tuple[int, int]] = {}  # object ref -> (slot, trial id)
        self._calls: dict[int, tuple[int, SlotCalls]] = {}  # trial id -> its slot, the driver's calls for it
        self._stopping = threading.Event()
        self._broken: BaseException | None = None  # the pump's connection to the cluster failed
        # Each slot index the store has seen, with where it measured: a slot on the same node and
        # GPUs takes that index back (its baseline holds), another gets a fresh one (its own baseline).
        self._seen: dict[int, Placement | None] = {t.slot: t.placement for t in store.trials()}
        actors = [self._start_actor() for _ in range(slots)]
        wheres = _share_cpus([self._ready(f"slot {n}", actor) for n, actor in enumerate(actors)], gpus, bind_env)
        for actor, where in zip(actors, wheres):
            self._assign(actor, where)
        self._pump = threading.Thread(target=self._serve_mailbox, name="servetune-ray-pump", daemon=True)
        self._pump.start()

    @classmethod
    def factory(cls, spec: StudySpec) -> Callable[[Driver, TrialExecutor, StudyStore], RaySlots]:
        """What StudyRunner(slots=...) takes: the study's slots on the connected cluster."""
        return lambda driver, executor, store: cls(driver, executor, store, slots=spec.parallel.slots,
                                                   gpus=slot_gpus(spec),
                                                   bind_env=cpu_bind_variables(spec.engine_kinds))

    # --- slots ----------------------------------------------------------------------------

    def _start_actor(self, avoid: str | None = None) -> Any:
        """A slot's actor; not on node `avoid` while another node can take it."""
        # Spread over the nodes: slots on different nodes share no cores, memory bandwidth or PCIe.
        options: dict[str, Any] = {"num_cpus": self._cpus, "max_concurrency": 2, "max_restarts": 0,
                                   "scheduling_strategy": "SPREAD"}
        if self._gpus:
            options["num_gpus"] = self._gpus
        args = (self._template, self._mailbox, os.getcwd())
        if avoid:
            try:
                return self._actor_class.options(**options, label_selector={_NODE_ID_LABEL: f"!{avoid}"},
                                                 fallback_strategy=[{"label_selector": {}}]).remote(*args)
            except ValueError:  # a Ray without label selectors (before 2.49): anywhere
                pass
        return self._actor_class.options(**options).remote(*args)

    def _ready(self, slot: str, actor: Any) -> Placement:
        """Where the slot just started runs, once Ray has found it a node; an error naming what was asked."""
        try:
            where: Placement = ray.get(actor.where.remote(), timeout=self._ready_timeout_s)
            return where
        except (GetTimeoutError, RayActorError) as exc:
            ray.kill(actor)
            asked = f"{self._gpus} GPU(s) and {self._cpus:g} CPU(s)"
            why = (f"no node had {asked} free within {self._ready_timeout_s:.0f} s"
                   if isinstance(exc, GetTimeoutError) else f"its actor died: {_first_line(exc)}")
            raise ServetuneError(f"--ray: {slot} could not start ({why}; the cluster has "
                                 f"{_resources()})") from None

    def _assign(self, actor: Any, where: Placement, *, reuse: bool = True) -> Placement:
        same = [i for i, seen in self._seen.items()
                if reuse and i not in self._actors and _same_place(seen, where)]
        slot = min(same) if same else next(i for i in range(len(self._seen) + len(self._actors) + 1)
                                           if i not in self._seen and i not in self._actors)
        placement: Placement = ray.get(actor.assign.remote(slot, where.env, where.cpus))
        self._actors[slot] = actor
        self._seen[slot] = placement
        self.placements.append(placement)
        return placement

    def submit(self, slot: int, trial: Trial, plan: TrialPlan, calls: SlotCalls) -> None:
        if self._broken is not None:
            raise ServetuneError(f"--ray: lost the Ray cluster: {_first_line(self._broken)}")
        with self._lock:
            self._calls[trial.id] = (slot, calls)
            ref = self._actors[slot].run.remote(trial, plan, calls.duplicate_of is not None)
            self._running[ref] = (slot, trial.id)

    def replacement(self, lost: int) -> Placement:
        ray.kill(self._actors.pop(lost))  # already dead; makes sure Ray gives back its resources
        gone = next(p for p in self.placements if p.slot == lost)
        # Elsewhere when it can: a node whose slot was just lost may be dying, unnoticed by Ray yet.
        actor = self._start_actor(avoid=gone.where.get("ray_node_id"))
        try:
            where = self._ready("a replacement slot", actor)
            # On the lost slot's node a CPU slot takes its share of the cores; elsewhere, no pinning.
            same_node = where.where.get("node") == gone.where.get("node")
            share = (gone.cpus if same_node else None) if not self._gpus else None
            env = {k: v for k, v in gone.env.items() if k in self._bind_env} if share else {}
            # A fresh index even on the same node: the lost slot's GPUs may be what failed.
            return self._assign(actor, dataclasses.replace(where, cpus=share, env={**where.env, **env}), reuse=False)
        except (ServetuneError, RayError) as exc:
            ray.kill(actor)
            raise SlotLost(_first_line(exc)) from None

    def stop_leftovers(self, trial: Trial, leftovers: Leftovers) -> bool:
        """On the host the trial ran on: here when the trial has no Ray node or this host is its
        host, else by a task pinned to a live node of that host (`nodes_of_host`: a raylet that
        died leaves its host, and the trial's server, running). The first node that answers has
        seen the host's processes. A host with no live node is out of reach until the study is
        resumed with a node there."""
        place = trial.placement.where if trial.placement else {}
        if not place.get("ray_node_id"):
            return leftovers.stop()
        own = ray.get_runtime_context().get_node_id()
        for node in nodes_of_host(place, _ray_nodes(), own):
            if node == own:
                return leftovers.stop()
            task = self._stop_task.options(num_cpus=0, scheduling_strategy=_pinned(node))
            try:
                return bool(ray.get(task.remote(leftovers), timeout=STOP_TIMEOUT_S))
            except RayError:  # that node died too, or never answered
                continue
        return False

    def stop(self) -> None:
        """Every slot stops its own server (its teardown checks no process and no port is left),
        then the actors and the mailbox are killed."""
        self.driver.close()
        self._stopping.set()
        actors = list(self._actors.values())
        try:
            ray.get([a.stop_servers.remote(STOP_TIMEOUT_S / 2) for a in actors], timeout=STOP_TIMEOUT_S)
        except RayError:
            pass  # a dead slot has no server of its own left; its trial's is stopped on resume
        for actor in [*actors, self._mailbox]:
            ray.kill(actor)
        self._pump.join(5)

    # --- the driver's side of the mailbox --------------------------------------------------

    def _serve_mailbox(self) -> None:
        """Hand the slots' calls to the driver's inbox and their ends to the driver, until stopped.
        A failure here (the cluster gone) ends every running trial with it, so the driver stops."""
        try:
            while not self._stopping.is_set():
                batch = ray.get(self._mailbox.take.remote(_POLL_S))
                for number, (slot, trial_id, name, args, kwargs) in batch:
                    self._deliver(number, slot, trial_id, name, args, kwargs)
                self._reap()
        except Exception as exc:
            if self._stopping.is_set():
                return
            self._broken = exc
            with self._lock:
                running, self._running = list(self._running.values()), {}
            for slot, trial_id in running:
                self.driver.finished(Finished(slot, trial_id, error=ServetuneError(
                    f"--ray: lost the Ray cluster: {_first_line(exc)}")))

    def _deliver(self, number: int | None, slot: int, trial_id: int, name: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        with self._lock:
            owner, calls = self._calls.get(trial_id, (None, None))
        if owner != slot or calls is None:
            # A slot given up as lost that still runs (a node cut off, not dead): the trial is
            # another slot's now, so nothing it measures may count.
            if number is not None:
                self._mailbox.reply.remote(number, False, SlotStopped())
            return
        try:
            fn = resolve_call(calls, self._store, name)
        except ValueError as exc:
            if number is not None:
                self._mailbox.reply.remote(number, False, ServetuneError(f"slot call {name!r}: {exc}"))
            return
        if number is None:
            self.driver.post(fn, *args)
            return
        if self.driver.closed:
            self._mailbox.reply.remote(number, False, SlotStopped())
            return
        future = self.driver.submit(fn, *args, **kwargs)
        future.add_done_callback(lambda done: self._reply(number, done))

    def _reply(self, number: int, done: Future[Any]) -> None:
        exc = done.exception()
        if exc is None:
            self._mailbox.reply.remote(number, True, done.result())
        else:
            self._mailbox.reply.remote(number, False, _portable(exc))

    def _reap(self) -> None:
        """Tell the driver of every trial that ended, or whose slot was lost."""
        with self._lock:
            refs = list(self._running)
        if not refs:
            return
        ended, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ended:
            with self._lock:
                slot, trial_id = self._running.pop(ref)
                self._calls.pop(trial_id, None)
            try:
                outcome = ray.get(ref)
                message = Finished(slot, trial_id, outcome=outcome)
            except RayActorError as exc:  # the worker process or its node is gone, or out of reach
                actor = self._actors.get(slot)
                if actor is not None:  # one out of reach may still live: killed, so it boots nothing more
                    ray.kill(actor)
                message = Finished(slot, trial_id, error=SlotLost(_first_line(exc)))
            except RayTaskError as exc:  # the trial's own error (a bug, a user error): the driver decides
                # The original exception, not Ray's wrapper, whose text carries the remote traceback:
                # a user error must still reach the CLI as its one line.
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                message = Finished(slot, trial_id, error=cause)
            self.driver.finished(message)


def _share_cpus(wheres: list[Placement], gpus: int, bind_env: tuple[str, ...] = ()) -> list[Placement]:
    """CPU slots (no GPUs) that share a node split its CPUs as local slots do (plan_placements):
    each server and its engine stay on their own cores. GPU slots and a node's only slot are not
    pinned."""
    by_node: dict[str, list[int]] = {}
    for i, where in enumerate(wheres):
        by_node.setdefault(where.where.get("node", ""), []).append(i)
    out = [dataclasses.replace(w, cpus=None) for w in wheres]
    if gpus:
        return out
    for members in by_node.values():
        if len(members) < 2:
            continue
        shares = plan_placements(len(members), 0, cpus=wheres[members[0]].cpus, bind_env=bind_env)
        for i, share in zip(members, shares):
            out[i] = dataclasses.replace(out[i], env={**out[i].env, **share.env}, cpus=share.cpus)
    return out


def nodes_of_host(place: Mapping[str, str], nodes: list[dict[str, Any]], own: str) -> list[str]:
    """Live Ray nodes (ids, from `ray.nodes()`) on the host where a trial placed at `place` ran,
    in the order to try them: the driver's own node, others of that host, and last the node the
    trial ran on (the one likely to have died, while Ray may still count it alive)."""
    address = {n["NodeID"]: n.get("NodeManagerAddress") for n in nodes}
    ran_on = place["ray_node_id"]
    host = place.get("node_ip") or address.get(ran_on)  # stores before node_ip: Ray's table, while it has the node
    live = [n["NodeID"] for n in nodes if n.get("Alive") and (n["NodeID"] == ran_on or
                                                                (host and address[n["NodeID"]] == host))]
    return sorted(live, key=lambda n: (n != own, n == ran_on))


def _pinned(node: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node, soft=False)


def _same_place(seen: Placement | None, where: Placement) -> bool:
    """The same node and the same GPUs: a baseline measured there holds for this slot."""
    return seen is not None and bool(seen.node) and seen.node == where.node and seen.env == where.env


def _portable(exc: BaseException) -> BaseException:
    """`exc` as it can travel to a slot: itself when it pickles, else its type and text."""
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# Ray's state calls below carry no annotations: each is called as the typed callable Ray documents.
_ResourceTable = Callable[[], dict[str, float]]


def _node_ip() -> str:
    return cast(Callable[[], str], ray.util.get_node_ip_address)()


def _ray_nodes() -> list[dict[str, Any]]:
    return cast(Callable[[], list[dict[str, Any]]], ray.nodes)()


def _resources() -> str:
    free = cast(_ResourceTable, ray.available_resources)()
    total = cast(_ResourceTable, ray.cluster_resources)()
    return ", ".join(f"{k} {free.get(k, 0):g} free of {total[k]:g}" for k in ("GPU", "CPU") if k in total) \
        or "no GPU or CPU"
