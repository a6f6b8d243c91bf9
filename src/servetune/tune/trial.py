"""One Trial: boot a server with a Config, measure every Scenario x replicate on it, stop it.

Each finished Run is committed to the store on its own, so a kill loses at most the Run in
flight; a resumed trial boots again and measures only what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import server_http
from ..engine import Engine, Server
from ..engine.bootfacts import BootFacts
from ..engine.cache import CacheDirs, cache_record
from ..engine.classify import tail
from ..engine.config import Config
from ..engine.cpu_layout import client_cores
from ..engine.launch import new_launch_token
from ..engine.placement import Placement
from ..engine.registry import block_pool_tokens
from ..load.bench import run_scenario
from ..load.options import RunOptions
from ..load.records import RunResult
from ..load.scenario import Scenario
from ..machine import RunMachine, RunSampler, checked_record
from ..store import StudyStore, Trial
from ..study.spec import StudySpec
from ..vocabulary import Outcome, for_http_status
from . import capacity_trial
from .slots import LiveServers

# A client-bound run (the load generator, not the server, was the bottleneck) is measured again
# up to this many times in all before the replicate is given up.
MAX_ATTEMPTS = 3

# Run outcomes that say the server stopped serving: the trial ends with them (evidence kept).
ENDS_TRIAL = frozenset({Outcome.crashed, Outcome.stalled, Outcome.run_timeout, Outcome.unauthorized,
                        Outcome.bad_response})

# (trial, scenario name, replicate, done requests, total requests); None scenario = booting
ProgressFn = Callable[[Trial, str | None, int, int, int], None]
# Decides after each full replicate whether more are needed: (trial, replicates done) -> stop?
EnoughFn = Callable[[Trial, int], bool]
# After every full replicate, whatever min_replicates says: why the trial stops measuring now
# (racing: clearly worse than the baseline, tune/racing.py), or None to go on.
RaceFn = Callable[[Trial, int], str | None]
# After a healthy boot: why this server runs as a config already measured (then it is not
# measured), or None.
DuplicateFn = Callable[[Trial, BootFacts], str | None]
# After a context_too_long boot (the trial, vLLM's estimate or None): the length that would fit.
FitsFn = Callable[[Trial, int | None], str | None]
# A slot's named call to the driver (tune/slots.py SlotCalls): call waits for the answer, post does not.
CallFn = Callable[..., Any]


@dataclass(frozen=True)
class TrialPlan:
    scenarios: list[Scenario]
    min_replicates: int
    max_replicates: int
    # `maximize: capacity`: a capacity search per scenario instead of replicates (capacity_trial.py)
    capacity: capacity_trial.CapacityPlan | None = None
    # Per scenario, the per-request limits (ms of ttft, tpot, e2el) a request meets to count for goodput
    goodput_slo: dict[str, dict[str, float]] = field(default_factory=dict)


class TrialExecutor:
    """Runs trials on one slot: `placement` (None: wherever servetune runs) and `port` are the
    slot's; `store` is the store or, on a slot of a parallel study, the driver's proxy of it;
    `live` (when given) holds the slot's running server, so the driver can stop it on Ctrl-C.
    `cache_root` holds the study's caches, a directory per slot (engine/cache.py); None: the
    servers keep theirs wherever the engine does by default."""

    def __init__(self, engine: Engine, store: StudyStore, out_dir: Path, tokenizer_dir: Path | None, *,
                 port: int | None = None, launch_flags: dict[str, str] | None = None,
                 placement: Placement | None = None, live: LiveServers | None = None,
                 cache_root: Path | None = None, allow_busy: bool = False):
        self.engine = engine
        self.store = store
        self.out_dir = out_dir
        self.tokenizer_dir = tokenizer_dir
        self.port = port
        # Flags every server of the study gets that are not part of what is tuned (a served name).
        self.launch = Config.of(launch_flags or {})
        self.placement = placement
        self.live = live
        self.cache_root = cache_root
        # Boot on a machine that something else uses (--allow-busy-gpu); else such a boot is refused.
        self.allow_busy = allow_busy

    def on_slot(self, store: StudyStore, placement: Placement | None, *, live: LiveServers) -> TrialExecutor:
        """This executor for a slot: same engine and launch flags, the slot's store handle,
        placement and port (a fixed study port + the slot's index)."""
        port = None if self.port is None else self.port + (placement.slot if placement else 0)
        slot = TrialExecutor(self.engine, store, self.out_dir, self.tokenizer_dir, port=port,
                             placement=placement, live=live, cache_root=self.cache_root, allow_busy=self.allow_busy)
        slot.launch = self.launch
        return slot

    @classmethod
    def for_study(cls, engine: Engine, spec: StudySpec, store: StudyStore, out_dir: Path, *,
                  cache_dir: str = "cache") -> TrialExecutor:
        """The executor of a study file's engine section: its model's tokenizer when the model
        directory has one (else the server's /tokenize), its port and served model name, and its
        cache root (`engine.cache_root`, else `cache_dir` in the study directory)."""
        model_dir = Path(spec.engine.model)
        served_name = spec.engine.served_model_name
        cache_root = Path(spec.engine.cache_root).expanduser() if spec.engine.cache_root else out_dir / cache_dir
        return cls(engine, store, out_dir,
                   tokenizer_dir=model_dir if (model_dir / "tokenizer.json").is_file() else None,
                   port=spec.engine.port,
                   launch_flags={"served-model-name": served_name} if served_name else None,
                   cache_root=cache_root.absolute())

    def run_calling(self, trial: Trial, plan: TrialPlan, *, call: CallFn, post: CallFn,
                    duplicates: bool) -> Outcome:
        """`run` on a slot: its decisions are the driver's SlotCalls, reached by name through
        `call(name, *args)` (waits for the answer) and `post` (progress; does not wait)."""
        return self.run(
            trial, plan,
            enough=lambda t, reps: call("enough", t, reps),
            progress=lambda t, s, r, d, n: post("progress", t, s, r, d, n),
            duplicate_of=(lambda t, facts: call("duplicate_of", t, facts)) if duplicates else None,
            fits_of=lambda t, estimate: call("fits_of", t, estimate),
            race=lambda t, reps: call("race", t, reps),
        )

    def run(self, trial: Trial, plan: TrialPlan, *, enough: EnoughFn, progress: ProgressFn,
            duplicate_of: DuplicateFn | None = None, fits_of: FitsFn | None = None,
            race: RaceFn | None = None) -> Outcome:
        """Run the trial to its end and return its outcome. Failures are outcomes, never raised."""
        log_path = self._log_path(trial)
        stored_log = str(log_path.relative_to(self.out_dir))  # relative: the study dir can move
        progress(trial, None, 0, 0, 0)
        # Before anything is launched: a busy machine ends the study here (MachineBusy, one line).
        where = f"trial #{trial.seq} ({trial.role})" + (f" on {self.placement.label()}" if self.placement else "")
        self.store.record_machine(trial.id, checked_record(self._env(), cpus=self._cpus(), allow_busy=self.allow_busy,
                                                           where=where))

        def on_spawn(server: Server) -> None:
            if self.live is not None:
                self.live.add(server)  # first: the driver may need to stop it before the store knows it
            self.store.record_server(trial.id, pid=server.pid, pgid=server.pgid,
                                     create_time=server.create_time, log_path=stored_log)

        # Stored before the spawn: a kill before on_spawn leaves a server recovery finds by this token.
        token = new_launch_token()
        self.store.record_launch(trial.id, launch_token=token, log_path=stored_log)
        config = trial.config.merged(self.launch)
        cache = None if self.cache_root is None else CacheDirs.for_slot(self.cache_root, trial.slot)
        wipe = trial.cache is not None and trial.cache.wipe_before_boot
        if cache is not None and wipe:
            cache.wipe()   # the boot that replaces an excluded one starts from nothing (analysis/outliers.py)
        before = cache.snapshot() if cache is not None else None
        started = self.engine.start(config, log_path, port=self.port, on_spawn=on_spawn, launch_token=token,
                                    placement=self.placement, cache=cache)
        self.store.record_boot(
            trial.id,
            healthy_at=(time.time() if started.outcome == Outcome.ok else None),
            boot_facts=started.boot_facts,
            mismatches=started.mismatches,
            log_path=stored_log,
            knobs=started.knobs,
            cache=None if cache is None or before is None else cache_record(
                cache, before, started.boot_facts, wiped=wipe, replaces_trial=trial.replaces),
        )
        if started.outcome != Outcome.ok or started.server is None:
            fits = fits_of(trial, started.estimated_max_model_len) \
                if fits_of is not None and started.outcome is Outcome.context_too_long else None
            detail: str | None = "\n".join(x for x in [started.detail, fits, *started.evidence] if x).strip()
            self.store.finish_trial(trial.id, started.outcome, detail=detail, log_tail=started.log_tail)
            return started.outcome

        server = started.server
        try:
            twin = duplicate_of(trial, started.boot_facts) if duplicate_of else None
            if twin is not None:
                # Measuring it would only measure its twin again: the boot is kept as evidence, no runs.
                outcome, detail = Outcome.duplicate, twin
            else:
                api_key = self.engine.client_api_key(config)  # from the server's environment, never stored
                with client_cores(started.client_cpus):
                    outcome, detail = self._measure(trial, plan, server, api_key, enough, progress,
                                                    block_pool_tokens(started.boot_facts), race)
                if outcome is Outcome.crashed:
                    detail = f"{detail}: {self.engine.diagnose(server).detail}"
                client = f"load client on {sorted(started.client_cpus)}" if started.client_cpus else ""
                detail = "; ".join(x for x in (detail, started.cpu_layout, client) if x) or None
        finally:
            stopped = self.engine.stop(server)
            if self.live is not None:
                self.live.discard(server)
        # Measurements stay valid; a user must still see that a process or the port was left.
        detail = "; ".join(x for x in (detail, stopped.problem()) if x) or None
        failed = outcome not in (Outcome.ok, Outcome.duplicate)
        log_tail = tail(log_path.read_text(errors="replace")) if failed else None
        self.store.finish_trial(trial.id, outcome, detail=detail, log_tail=log_tail)
        return outcome

    def _measure(self, trial: Trial, plan: TrialPlan, server: Server, api_key: str | None, enough: EnoughFn,
                 progress: ProgressFn, kv_cache_tokens: int | None,
                 race: RaceFn | None = None) -> tuple[Outcome, str | None]:
        """`kv_cache_tokens`: the KV pool of this boot (its log), for a trace Run's pool hit rate."""
        try:
            model = served_model_name(server.url, api_key)
        except server_http.ServerAnswerError as exc:
            return for_http_status(exc.status), f"asking the server for its model: {exc}"
        if plan.capacity is not None:
            return self._measure_capacity(trial, plan, plan.capacity, server, api_key, model, progress,
                                          kv_cache_tokens)
        for replicate in range(1, plan.max_replicates + 1):
            for scenario in plan.scenarios:
                attempts = [r for r in self.store.runs(trial.id)
                            if (r.scenario, r.replicate) == (scenario.name, replicate)]
                if any(r.ok for r in attempts):
                    continue
                for attempt in range(len(attempts) + 1, MAX_ATTEMPTS + 1):
                    if not server.is_alive():
                        return Outcome.crashed, f"server exited before {scenario.name} replicate {replicate}"
                    result, started_at, machine = self._run_once(trial, server.url, api_key, model, scenario,
                                                                 replicate, attempt, progress, kv_cache_tokens,
                                                                 plan.goodput_slo.get(scenario.name))
                    if not server.is_alive():
                        # Requests that died with the server are not a measurement of this config.
                        return Outcome.crashed, f"server died during {scenario.name} replicate {replicate}"
                    self.store.record_run(trial.id, replicate, _relative(result, self.out_dir),
                                          started_at=started_at, ended_at=time.time(), attempt=attempt,
                                          machine=machine)
                    if result.outcome in ENDS_TRIAL:
                        return result.outcome, f"{scenario.name} replicate {replicate}: {result.error}"
                    if result.outcome != Outcome.client_bound:
                        break  # a client-bound run is kept as evidence but measured again
            if replicate < plan.max_replicates and race is not None and (why := race(trial, replicate)) is not None:
                return Outcome.ok, why
            if replicate >= plan.min_replicates and enough(trial, replicate):
                break
        return Outcome.ok, None

    def _measure_capacity(self, trial: Trial, plan: TrialPlan, capacity: capacity_trial.CapacityPlan, server: Server,
                          api_key: str | None, model: str, progress: ProgressFn,
                          kv_cache_tokens: int | None) -> tuple[Outcome, str | None]:
        def record(replicate: int, result: RunResult, started_at: float, machine: RunMachine | None) -> None:
            self.store.record_run(trial.id, replicate, _relative(result, self.out_dir), started_at=started_at,
                                  ended_at=max(time.time(), started_at), machine=machine)

        outcome, detail = capacity_trial.measure_capacity(
            self.store, trial, plan.scenarios, capacity,
            capacity_trial.Server(server.url, model, api_key, server.is_alive,
                                  lambda: self.engine.before_run(server.url, api_key), kv_cache_tokens,
                                  sampler=lambda: RunSampler(self._env(), cpus=self._cpus())),
            runs_dir=self.out_dir / "runs", study_dir=self.out_dir, tokenizer_dir=self.tokenizer_dir,
            record=record, progress=lambda name, n, d, t: progress(trial, name, n, d, t))
        return Outcome(outcome), detail

    def _run_once(self, trial: Trial, url: str, api_key: str | None, model: str, scenario: Scenario,
                  replicate: int, attempt: int, progress: ProgressFn,
                  kv_cache_tokens: int | None, goodput_slo: dict[str, float] | None,
                  ) -> tuple[RunResult, float, RunMachine | None]:
        self.engine.before_run(url, api_key)  # the engine's own reset between runs (vLLM: its prefix cache)
        started_at = time.time()
        suffix = f"-a{attempt}" if attempt > 1 else ""
        sampler = RunSampler(self._env(), cpus=self._cpus())
        with sampler:
            result = self._run_scenario(trial, url, api_key, model, scenario, replicate, suffix, progress,
                                        kv_cache_tokens, goodput_slo)
        return marked_contended(result, sampler.result), started_at, sampler.result

    def _run_scenario(self, trial: Trial, url: str, api_key: str | None, model: str, scenario: Scenario,
                      replicate: int, suffix: str, progress: ProgressFn, kv_cache_tokens: int | None,
                      goodput_slo: dict[str, float] | None) -> RunResult:
        return run_scenario(url, model, scenario, RunOptions(
            tokenizer_dir=self.tokenizer_dir,
            out_dir=self.out_dir / "runs",
            run_id=f"trial{trial.seq:03d}-{scenario.name}-r{replicate}{suffix}",
            progress=lambda d, t: progress(trial, scenario.name, replicate, d, t),
            api_key=api_key,
            metric_names=self.engine.metric_names,
            detailed=False,   # a study keeps every request in the run's JSONL; the JSON stays small
            kv_cache_tokens=kv_cache_tokens,
            slo=goodput_slo or None,
        ))

    def _env(self) -> dict[str, str] | None:
        """The slot's environment (its GPUs), which tells the machine records and samples which GPUs to read."""
        return None if self.placement is None else self.placement.env

    def _cpus(self) -> tuple[int, ...] | None:
        """The slot's own CPUs (a share of the host), where it has them."""
        return None if self.placement is None else self.placement.cpus

    def _log_path(self, trial: Trial) -> Path:
        logs = self.out_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"trial{trial.seq:03d}-{trial.role}.log"
        boot = 2
        while path.exists():  # a resumed trial keeps the log of its earlier boot
            path = logs / f"trial{trial.seq:03d}-{trial.role}-boot{boot}.log"
            boot += 1
        return path


def _relative(result: RunResult, base: Path) -> RunResult:
    """Store records paths relative to the study dir, so the dir can be moved (or carried to a GPU box)."""
    if result.records_path is None:
        return result
    path = Path(result.records_path)
    try:
        return result.model_copy(update={"records_path": str(path.resolve().relative_to(base.resolve()))})
    except ValueError:
        return result


def marked_contended(result: RunResult, machine: RunMachine | None) -> RunResult:
    """The run's `contended` mark (load/health.py: the client's loop lagging while it idles) also
    set when other processes took much of the host's CPU during the run (machine/sampler.py)."""
    if machine is None or not machine.contended or machine.mean_others_share is None:
        return result
    health = dict(result.client_health)
    warning = (f"machine contended: other processes took {100 * machine.mean_others_share:.0f} % of the host's CPU "
               "during the run")
    health.update(contended=True, warnings=[*health.get("warnings", []), warning])
    return result.model_copy(update={"client_health": health})


def served_model_name(url: str, api_key: str | None) -> str:
    """The server's first model; ServerAnswerError when it does not say."""
    models_url = f"{url}/v1/models"
    return server_http.model_ids(server_http.get_json(models_url, api_key), models_url)[0]

