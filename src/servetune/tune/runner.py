"""StudyRunner: the only place that wires engine, load, store and search together.

Ask/tell over slots (`parallel.slots`): whenever a slot is free the runner asks what it runs
next (a resumed trial, the slot's own baseline, its baseline re-measurement, a candidate from
the strategy, which sees the trials running elsewhere) and hands it over; the runner's thread is
the driver, the only one that reads and writes the store (tune/slots.py). With one slot this
is the sequential study: the sequence of trials is a pure function of what the store holds
(strategies are deterministic given the history and seed; the finalist plan is written to the
store before it starts), so running the same command after a kill continues exactly where the
study stopped. With several, which slot finishes first decides the order, and resume continues
from the store with nothing lost or counted twice.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..engine import Engine, engine_for
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..engine.placement import Placement, plan_placements
from ..errors import ServetuneError
from ..search import Strategy, make_strategy
from ..store import EtaEntry, PlannedTrial, StudyStore, Trial, TrialRole, Verdict
from ..study.spec import StudySpec
from ..vocabulary import Outcome
from . import analysis, bandwidth, capacity_trial, known, plan, revalidation, verdict_rule
from . import eta as eta_seed
from .analysis_types import StudyAnalysis
from .display import StudyDisplay
from .lock import StudyLock, TunerProcess
from .recovery import Leftovers, reclaim_unfinished
from .slots import Driver, Finished, LiveServers, SlotBackend, SlotCalls, SlotLost, ThreadSlots
from .trial import TrialExecutor, TrialPlan

# A resumed study may get more budget or other slots, nothing else.
SPEC_KEYS_THAT_MAY_CHANGE = ("budget", "parallel", "measure_bandwidth")

Work = tuple[str, Config, dict[str, Any]]  # (role, config, params) of a trial to begin



# Makes the slots of a study once the runner is ready for them: (driver, executor template, store)
# -> backend. None: threads of this host (ThreadSlots). `--ray` passes tune.ray_slots's.
SlotFactory = Callable[[Driver, TrialExecutor, StudyStore], SlotBackend]


class StudyRunner:
    def __init__(self, spec: StudySpec, out_dir: Path, *, display: StudyDisplay, stop_after_s: float | None = None,
                 slots: SlotFactory | None = None):
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.display = display
        self._slot_factory = slots
        # Before the lock: too few GPUs or CPUs for the slots is the study file's error, nothing is touched.
        # On Ray the slots' placements are what the cluster assigns (set in _start_slots).
        self.placements: list[Placement] = (plan_placements(spec.parallel.slots, spec.parallel.gpus_per_trial)
                                            if slots is None else [Placement(i) for i in range(spec.parallel.slots)])
        # Before anything is read or written: a second tuner on this directory stops here, and the
        # first one's live trial is never mistaken for one a killed tuner left behind.
        self._lock = StudyLock(self.out_dir).acquire()
        try:
            self.store = StudyStore.in_dir(self.out_dir)
            self._check_same_study()
        except BaseException:
            self._lock.release()
            raise
        self.engine: Engine = engine_for(spec.engine)  # the registered class of `engine.kind`
        self.engine.check_secrets()  # a missing secret stops the study here, before any boot
        self.store.redact = self.engine.redact
        # The template every slot's executor is made from when the study starts (see _start_slots).
        self.executor = TrialExecutor.for_study(self.engine, spec, self.store, self.out_dir)
        self.baseline_config = spec.baseline_config()
        self.defaults: EngineDefaults | None = None  # read in run(): a subprocess of ~10 s
        self.seed: eta_seed.Eta | None = None  # the ETA before anything is measured, set in run()
        self._session = 0
        self._last_heartbeat = 0.0
        self._deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        self.paused = False
        # Set in _start_slots: the driver's inbox, the slots and an executor per slot.
        self._driver = Driver()
        self._slots: SlotBackend | None = None
        self._lost: set[int] = set()                 # slots whose worker or node went away
        self._busy: dict[int, int] = {}              # slot -> id of the trial running there
        self._resumes: list[Trial] = []           # trials a killed tuner left, to run first
        self._queued: dict[int, list[Work]] = {}     # a finalist waits for its baseline on the same slot
        self._search_over = False
        self._strategy: Strategy | None = None

    # --- entry point --------------------------------------------------------------------

    def run(self) -> StudyAnalysis:
        me = TunerProcess.current()
        self._session = self.store.begin_session(pid=me.pid, host=me.host, pid_create_time=me.pid_create_time)
        reason = "interrupted"
        try:
            with self.display, sigterm_as_interrupt():
                try:
                    self._read_engine_defaults()
                    for line in capacity_trial.refresh_estimates(self.store, self.spec, self.out_dir):
                        self.display.note(f"capacity re-estimated by today's judgement, {line}")
                    bandwidth.ensure_measured(self.store, list(self.spec.engine.command), self.placements[0].env,
                                              enabled=self.spec.measure_bandwidth, note=self.display.note)
                    verdict_rule.record_cap(self.store, self.spec)
                    self._seed_eta()
                    self._start_slots()
                    try:
                        self._recover_unfinished()
                        self._search()
                        self._validate_finalists()
                    finally:
                        assert self._slots is not None
                        self._slots.stop()  # Ctrl-C, SIGTERM or an error: every slot's server stops
                    reason = "finished"
                except _Pause:
                    self.paused = True
                    reason = "paused"
        finally:
            self.store.end_session(self._session, reason)
            self._lock.release()
        result = analysis.analyze(self.store, self.spec)
        if reason == "finished":
            eta_seed.record_took(self.store)
        if not self.paused:
            self.store.set_verdict(Verdict(result.winner.key if result.winner else None, result.winner_reason))
        return result

    # --- phases -------------------------------------------------------------------------

    def _read_engine_defaults(self) -> None:
        self.defaults = known.engine_defaults(self.store, list(self.spec.engine.command),
                                              lambda _command: self.engine.read_defaults())
        plan.check_flags(self.spec, self.defaults)  # a misspelt flag stops the study before any boot
        if not self.defaults.known:
            self.display.note(f"engine defaults {self.defaults.source}: only boot logs tell configs apart")

    def _seed_eta(self) -> None:
        """Before the first boot: an ETA from the model's size and the scenarios, kept to be judged."""
        seed, basis = eta_seed.seed(Path(self.spec.engine.model), list(self.spec.scenarios))
        self.seed = seed
        eta_seed.store_seed(self.store, seed)
        if not self.store.trials():
            predicted = (analysis.planned_trial_count(self.store, self.spec)
                         * eta_seed.next_trial_s(self.spec, seed) / len(self.placements))
            eta_seed.record_first_estimate(self.store, predicted, basis, at=time.time())
            self.display.note(f"first estimate {predicted / 60:.1f} min ({basis}, boot ~{seed.boot_s:.0f} s)")

    def _start_slots(self) -> None:
        if self._slot_factory is None:
            self._slots = ThreadSlots(self._driver, self.placements, LiveServers(), self.executor, self.store)
        else:
            self._slots = self._slot_factory(self._driver, self.executor, self.store)
            self.placements = self._slots.placements
            for placement in self.placements:
                self.display.note(f"{placement.label()} is ready")
        self.display.use_slots([p.label() for p in self.placements])

    def _live_slots(self) -> list[Placement]:
        return [p for p in self.placements if p.slot not in self._lost]

    def _placement(self, slot: int) -> Placement:
        """Slot indices need not be 0..N-1: a Ray slot on another node than the one a resumed
        study's slot measured on, or a replacement, gets a fresh index (and its own baseline)."""
        return next(p for p in self.placements if p.slot == slot)

    def _recover_unfinished(self) -> None:
        """A killed predecessor may have left trials `running` and their servers alive: they run first."""
        assert self._slots is not None
        for trial in reclaim_unfinished(self.store, self._session, self.display.note, stop=self._slots.stop_leftovers):
            self.display.note(f"resuming trial #{trial.seq} ({trial.role}: {self._label(trial.config)})")
            self._resumes.append(trial)

    def _search(self) -> None:
        self._strategy = make_strategy(self.spec)
        self._keep_slots_busy(self._search_work)

    def _search_work(self, slot: int) -> Trial | Work | None:
        """What `slot` runs next in the search: its resumed trial, its own baseline, a baseline
        re-measurement, or the strategy's next candidate; None for nothing now."""
        resumed = self._pop_resume(slot)
        if resumed is not None:
            return resumed
        if not self._slot_has_baseline(slot):
            return ("baseline", self.baseline_config, {})
        if self._search_over:
            return None
        candidates = [t for t in self.store.trials("candidate") if known.was_booted(t)]
        if self.spec.budget.trials is not None and len(candidates) >= self.spec.budget.trials:
            self._end_search(f"trial budget reached ({self.spec.budget.trials} candidates)")
            return None
        if not self._time_left_for_another():
            self._end_search("wall-clock budget reached")
            return None
        assert self._strategy is not None
        # Asked before a re-measurement is due: a check is booted only before a candidate that
        # boots, so a search that has run dry boots none after its last candidate (a budget-limited
        # one has none either), and a candidate the store already decides goes first. Strategies
        # keep no state, so the answer is asked again after the check.
        proposal = self._strategy.propose(analysis.history(self.store, self.spec))
        if proposal is None and not self._busy:
            self._end_search("search strategy finished: nothing left to try")
            return None
        check_due = self._candidates_since_baseline(slot) >= self.spec.baseline_every
        if proposal is None:  # the strategy waits for the running trials (ofat): asked again after one ends
            return ("baseline_check", self.baseline_config, {}) if check_due else None
        candidate = self.spec.config_for(proposal.params)
        if check_due and self._would_boot(candidate):
            return ("baseline_check", self.baseline_config, {})
        return ("candidate", candidate, proposal.params)

    def _would_boot(self, candidate: Config) -> bool:
        defaults = self.defaults or EngineDefaults()
        return known.before_boot(self.store, candidate, self.baseline_config, defaults) is None

    def _end_search(self, why: str) -> None:
        self._search_over = True
        self.display.note(why)

    def _validate_finalists(self) -> None:
        plan = self.store.final_plan()
        if plan is None:
            keys = analysis.pick_finalists(self.store, self.spec, self.spec.finalists)
            plan = []
            for key in keys:
                plan += [PlannedTrial(TrialRole.baseline_final, self.baseline_config.key()),
                         PlannedTrial(TrialRole.finalist, key)]
            if not keys and self.spec.finalists > 0 and self._baseline_boot_variance_unknown():
                # Every verdict carries boot-to-boot variance, learnt from a config booted twice;
                # `finalists: 0` asks for no boot after the search, so it gets none.
                plan = [PlannedTrial(TrialRole.baseline_final, self.baseline_config.key())]
            self.store.set_final_plan(plan)
            if self.spec.finalists == 0:
                self.display.note("finalists: 0: no candidate is re-validated on a fresh boot")
            elif not keys:
                self.display.note("no candidate beat the baseline's point estimate: no finalists to re-validate"
                                  + ("; one more baseline boot to measure boot-to-boot variance" if plan else ""))
        self._run_final_plan(plan)
        while (leader := self._next_revalidation()) is not None:
            plan = [*plan, PlannedTrial(TrialRole.baseline_final, self.baseline_config.key()),
                    PlannedTrial(TrialRole.finalist, leader)]
            self.store.set_final_plan(plan)   # before the boots: a resume continues the same plan
            self._run_final_plan(plan)

    def _run_final_plan(self, plan: list[PlannedTrial]) -> None:
        configs = {t.config.key(): t for t in self.store.trials()}
        handed_out = [t for t in self.store.trials() if t.role in (TrialRole.finalist, TrialRole.baseline_final)]
        left: list[Work] = [(role, configs[key].config, configs[key].params) for role, key in plan[len(handed_out):]]
        self._keep_slots_busy(lambda slot: self._final_work(slot, left))

    def _next_revalidation(self) -> str | None:
        """The leading finalist to boot again with the baseline (re-validation until decided), or None."""
        look = revalidation.next_look(analysis.analyze(self.store, self.spec), self.spec,
                                      verdict_rule.revalidation_cap(self.store))
        if look.leader is None:    # nothing re-validated (finalists: 0, no finalist): nothing to say
            return None
        if look.key is not None and not self._time_left_for_pair():
            self.display.note(escape(f"{look.line()}; but the wall-clock budget leaves no time for another boot pair"))
            return None
        self.display.note(escape(look.line()))
        return look.key

    def _time_left_for_pair(self) -> bool:
        if self.spec.budget.wall_minutes is None:
            return True
        per_trial = eta_seed.next_trial_s(self.spec, self._eta())
        return self.store.elapsed_wall_s() + 2 * per_trial <= self.spec.budget.wall_minutes * 60

    def _final_work(self, slot: int, left: list[Work]) -> Trial | Work | None:
        """The next re-validation boot for `slot`. A finalist runs on the slot that has just booted
        the baseline for it, right after it: the comparison it is made for."""
        resumed = self._pop_resume(slot)
        if resumed is not None:
            return resumed
        queued = self._queued.setdefault(slot, [])
        if not queued and left:
            queued.append(left.pop(0))
            if queued[0][0] == "baseline_final" and left and left[0][0] == "finalist":
                queued.append(left.pop(0))
        return queued.pop(0) if queued else None

    def _baseline_boot_variance_unknown(self) -> bool:
        """True when candidates were measured but no config has two measured boots yet."""
        ok = [t for t in self.store.trials() if t.ok]
        if not any(t.role is TrialRole.candidate for t in ok):
            return False
        boots = Counter(t.config.key() for t in ok)
        return max(boots.values()) < 2

    # --- slots --------------------------------------------------------------------------

    def _keep_slots_busy(self, next_work: Any) -> None:
        """Hand `next_work(slot)` to every free slot until no slot gets anything and none is busy.
        A --stop-after pause starts nothing more and lets the running trials end first."""
        pausing = False
        while True:
            if not pausing:
                try:
                    self._fill_free_slots(next_work)
                except _Pause:
                    pausing = True
            if not self._busy:
                if pausing:
                    raise _Pause
                return
            self._wait_for_a_slot()

    def _fill_free_slots(self, next_work: Any) -> None:
        for placement in self._live_slots():
            slot = placement.slot
            while slot not in self._busy:
                work = next_work(slot)
                if work is None:
                    break
                if isinstance(work, Trial):
                    self._dispatch(slot, work)
                else:
                    self._start_trial(*work, slot=slot)  # a trial decided without a boot leaves the slot free

    def _start_trial(self, role: str, config: Config, params: dict[str, Any], *, slot: int) -> None:
        self._pause_if_no_time()
        trial = self.store.begin_trial(TrialRole(role), config, params, session_id=self._session, slot=slot,
                                       placement=self._placement(slot))
        self._dispatch(slot, trial)

    def _pop_resume(self, slot: int) -> Trial | None:
        """A trial left by a killed tuner on this slot, or on one this study does not have now (fewer
        slots, a slot lost mid-trial, a Ray slot now elsewhere): any free slot takes that one."""
        live = {p.slot for p in self._live_slots()}
        for i, trial in enumerate(self._resumes):
            if trial.slot == slot or trial.slot not in live:
                del self._resumes[i]
                self.store.move_trial(trial.id, slot=slot, placement=self._placement(slot))
                return self.store.trial(trial.id)
        return None

    def _dispatch(self, slot: int, trial: Trial) -> None:
        self._update_overview()
        label = self._label(trial.config)
        is_candidate = trial.role is TrialRole.candidate
        defaults = self.defaults or EngineDefaults()
        decided = (known.before_boot(self.store, trial.config, self.baseline_config, defaults, excluding=trial.id)
                   if is_candidate else None)
        if decided is not None:
            outcome, detail = decided
            self.store.finish_trial(trial.id, outcome, detail=detail)
            self.display.note(f"#{trial.seq} {trial.role} {label}: {outcome}, not booted: {escape(detail[:300])}")
            self._update_overview()
            return
        eta_now = time.time() + analysis.remaining_s(self.store, self.spec)
        self._log_eta(trial, eta_now)
        plan = TrialPlan(scenarios=list(self.spec.scenarios), min_replicates=self.spec.replicates.min,
                         max_replicates=self.spec.replicates.max, capacity=capacity_trial.plan_for(self.spec))
        # Run by the driver (this thread) when the trial's slot asks: what needs the store.
        calls = SlotCalls(
            enough=lambda t, reps: analysis.enough_replicates(self.store, self.spec, t, reps),
            progress=lambda t, s, r, d, n: self._on_progress(t, label, s, r, d, n),
            duplicate_of=(lambda t, facts: known.after_boot(self.store, t, facts, self.baseline_config, defaults))
            if is_candidate else None,
            fits_of=lambda t, estimate: known.context_fit(self.store, t, estimate, self.baseline_config),
        )
        assert self._slots is not None
        self._busy[slot] = trial.id
        self._slots.submit(slot, trial, plan, calls)

    def _wait_for_a_slot(self) -> None:
        """Serve the slots' calls until one finishes its trial; then report that trial."""
        finished: Finished = self._driver.serve()
        self._busy.pop(finished.slot, None)
        if isinstance(finished.error, SlotLost):
            self._slot_lost(finished)
            return
        if finished.error is not None:
            raise finished.error  # a slot's bug or user error ends the study (slots are stopped)
        done = self.store.trial(finished.trial_id)
        label = self._label(done.config)
        where = f" on {self._placement(done.slot).label()}" if len(self.placements) > 1 else ""
        if finished.outcome != str(Outcome.ok):
            self.display.note(f"[yellow]#{done.seq} {done.role} {label}: {finished.outcome}[/]{where} "
                              f"{escape((done.detail or '')[:300])}")
        else:
            boot = f"boot {done.boot_s:.0f} s, " if done.boot_s else ""
            took = f", {done.ended_at - done.started_at:.0f} s" if done.ended_at is not None else ""
            self.display.note(f"#{done.seq} {done.role} {label}: ok ({boot}"
                              f"{len(self.store.runs(done.id))} runs{took}){where}")
        self._update_overview()

    def _slot_lost(self, finished: Finished) -> None:
        """A slot's worker or node went away mid-trial: stop what its server left where it ran,
        then the trial runs again on the next free slot (a new boot; its recorded runs count,
        and the run in flight, never recorded, is measured again). A replacement slot joins."""
        assert self._slots is not None
        trial = self.store.trial(finished.trial_id)
        self._lost.add(finished.slot)
        self.display.note(f"[yellow]{self._placement(finished.slot).label()} lost during #{trial.seq} "
                          f"{trial.role}: {escape(str(finished.error))}; the trial runs again on another slot[/]")
        self._slots.stop_leftovers(trial, Leftovers.of(self.store, trial))
        self.store.reopen_trial(trial.id, session_id=self._session)
        self._resumes.append(self.store.trial(trial.id))
        try:
            replacement = self._slots.replacement(finished.slot)
        except SlotLost as exc:
            self.display.note(f"[yellow]no slot replaces it: {escape(str(exc))}[/]")
        else:
            self.display.note(f"{replacement.label()} replaces {self._placement(finished.slot).label()}")
            self.display.use_slots([p.label() for p in self.placements])
        if not self._live_slots():
            raise ServetuneError("every slot of the study was lost; run the same command again to resume")

    def _on_progress(self, trial: Trial, label: str, scenario: str | None, replicate: int,
                     done: int, total: int) -> None:
        self.display.trial_step(trial, label, scenario, replicate, done, total)
        now = time.monotonic()
        if now - self._last_heartbeat > 5:
            self._last_heartbeat = now
            self.store.heartbeat(self._session)

    def _label(self, config: Config) -> str:
        """For the display, which reads rich markup: a value like `[/]` is text, not a tag."""
        return escape(config.label(self.baseline_config))

    # --- budget and ETA -----------------------------------------------------------------

    def _update_overview(self) -> None:
        done = len([t for t in self.store.trials() if t.done])
        self.display.trials(done, analysis.planned_trial_count(self.store, self.spec),
                            analysis.remaining_s(self.store, self.spec))

    def _eta(self) -> eta_seed.Eta:
        return eta_seed.for_study(self.spec, self.store.trials(), self.store.runs(), self.seed)

    def _pause_if_no_time(self) -> None:
        """With --stop-after, do not start a boot that cannot finish: a cut trial costs a second boot."""
        if self._deadline is None:
            return
        eta = self._eta()
        if not eta.measured:
            return  # nothing measured yet: no basis for a decision, so try
        needed = eta_seed.next_trial_s(self.spec, eta)
        if time.monotonic() + needed > self._deadline:
            self.display.note(f"pausing: the next trial needs ~{needed:.0f} s, fewer are left")
            raise _Pause

    def _time_left_for_another(self) -> bool:
        if self.spec.budget.wall_minutes is None:
            return True
        per_trial = eta_seed.next_trial_s(self.spec, self._eta())
        reserve = 2 * self.spec.finalists * per_trial / len(self._live_slots())  # finalists and their baseline boots
        return self.store.elapsed_wall_s() + per_trial + reserve <= self.spec.budget.wall_minutes * 60

    def _slot_has_baseline(self, slot: int) -> bool:
        """A slot's first trial is the baseline there (begun: it may still be running)."""
        return any(t.role.is_baseline and t.slot == slot for t in self.store.trials())

    def _candidates_since_baseline(self, slot: int) -> int:
        """Booted candidates on `slot` since its last baseline boot: `baseline_every` counts per slot."""
        count = 0
        for trial in reversed(self.store.trials()):
            if trial.slot != slot:
                continue
            if trial.role.is_baseline:
                break
            if trial.role is TrialRole.candidate and known.was_booted(trial):
                count += 1
        return count

    def _log_eta(self, trial: Trial, predicted_end: float) -> None:
        self.store.log_eta(EtaEntry(trial.seq, time.time(), predicted_end))

    # --- identity -----------------------------------------------------------------------

    def _check_same_study(self) -> None:
        new = self.spec.model_dump(mode="json")
        stored = self.store.spec_doc()
        if stored is None:
            self.store.set_spec_doc(new)
            return
        old = _as_read_today(stored)
        # A key the stored spec lacks was added by a newer servetune: its default is not a change.
        changed = [k for k in sorted(set(old) | set(new))
                   if k not in SPEC_KEYS_THAT_MAY_CHANGE and k in old and old.get(k) != new.get(k)]
        if changed:
            raise ServetuneError(
                f"{self.store.path}: this directory holds a different study (changed: {', '.join(changed)}); "
                "use another --out directory, or restore the study file it was started with"
            )
        self.store.set_spec_doc(new)


class _Pause(Exception):
    """Raised before a trial when --stop-after leaves too little time for it."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the study as Ctrl-C does (the driver then stops every slot's server).
    Signals reach Python's main thread only and a handler is the whole process's: a runner
    driven from another thread (an embedding program) leaves the process's handler alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run ends through the same cleanup (session ended, servers stopped)."""
    raise KeyboardInterrupt(f"signal {signum}")


def _as_read_today(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as this servetune reads it: a field added since (`objective.per_gpu`) takes
    its default, so it does not look changed; one it cannot read is compared as stored."""
    try:
        return StudySpec.from_store(stored).model_dump(mode="json")
    except (ValueError, ServetuneError):   # pydantic's ValidationError is a ValueError
        return stored
