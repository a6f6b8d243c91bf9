"""StudyRunner: the only place that wires engine, load, store and search together.

Ask/tell over slots (`parallel.slots`): whenever a slot is free the runner takes what it runs
next (a resumed trial first, else what the study's phase plans: tune/phases.py) and hands it
over; the runner's thread is the driver, the only one that reads and writes the store
(tune/slots.py). With one slot this is the sequential study: the sequence of trials is a pure
function of what the store holds (strategies are deterministic given the history and seed; the
finalist plan is written to the store before it starts), so running the same command after a
kill continues exactly where the study stopped. With several, which slot finishes first decides
the order, and resume continues from the store with nothing lost or counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape

from ..analysis import analysis, known, screening, verdict_rule
from ..analysis import eta as eta_seed
from ..analysis.types import StudyAnalysis
from ..engine import Engine, engine_for_study
from ..engine.cache import CacheRecord
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..engine.placement import Placement, plan_placements
from ..engine.registry import cpu_bind_variables
from ..errors import ServetuneError
from ..models.source import locate
from ..store import EtaEntry, StudyStore, Trial, TrialRole, Verdict
from ..study.objective import Objective
from ..study.spec import StudySpec
from ..vocabulary import Outcome
from . import bandwidth, capacity_trial, phases, plan, provenance, racing
from .display import StudyDisplay
from .identity import check_same_study, store_spec
from .recovery import Leftovers
from .session import TunerSession
from .slots import Driver, Finished, LiveServers, SlotBackend, SlotCalls, SlotLost, ThreadSlots
from .trial import TrialExecutor, TrialPlan

# Makes the slots of a study once the runner is ready for them: (driver, executor template, store)
# -> backend. None: threads of this host (ThreadSlots). `--ray` passes tune.ray_slots's.
SlotFactory = Callable[[Driver, TrialExecutor, StudyStore], SlotBackend]


class StudyRunner:
    def __init__(self, spec: StudySpec, out_dir: Path, *, display: StudyDisplay, stop_after_s: float | None = None,
                 slots: SlotFactory | None = None, allow_busy: bool = False):
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.display = display
        self._slot_factory = slots
        # Before the lock: too few GPUs or CPUs for the slots is the study file's error, nothing is touched.
        # On Ray the slots' placements are what the cluster assigns (set in _start_slots).
        self.placements: list[Placement] = (plan_placements(spec.parallel.slots, spec.parallel.gpus_per_trial,
                                                            bind_env=cpu_bind_variables(spec.engine_kinds))
                                            if slots is None else [Placement(i) for i in range(spec.parallel.slots)])
        # The lock before anything is read or written; a directory holding another study stops here.
        self.session = TunerSession.open(self.out_dir, lambda store: self._check_start(store))
        self.store = self.session.store
        self.engine: Engine = engine_for_study(spec)  # the registered class of `engine.kind` (or each section's)
        self.engine.check_secrets()  # a missing secret stops the study here, before any boot
        self.store.redact = self.engine.redact
        # The template every slot's executor is made from when the study starts (see _start_slots).
        self.executor = TrialExecutor.for_study(self.engine, spec, self.store, self.out_dir)
        self.executor.allow_busy = allow_busy  # --allow-busy-gpu: boots on a machine another process uses
        self.baseline_config = spec.baseline_config()
        self.defaults: EngineDefaults | None = None  # read in run(): a subprocess of ~10 s
        self.seed: eta_seed.Eta | None = None  # the ETA before anything is measured, set in run()
        self._deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        self.paused = False
        # Set in _start_slots: the driver's inbox, the slots and an executor per slot.
        self._driver = Driver()
        self._slots: SlotBackend | None = None
        self._lost: set[int] = set()                 # slots whose worker or node went away
        self._busy: dict[int, int] = {}              # slot -> id of the trial running there
        self._resumes: list[Trial] = []              # trials a killed tuner left, to run first

    # --- entry point --------------------------------------------------------------------

    def run(self) -> StudyAnalysis:
        with self.session.running(), self.display:
            try:
                self._read_engine_defaults()
                for line in capacity_trial.refresh_estimates(self.store, self.spec, self.out_dir):
                    self.display.note(f"capacity re-estimated by today's judgement, {line}")
                bandwidth.ensure_measured(self.store, list(self.spec.engine.command), self.placements[0].env,
                                          enabled=self.spec.measure_bandwidth, note=self.display.note)
                verdict_rule.record_cap(self.store, self.spec)
                provenance.record_image(self.store, list(self.spec.engine.command), self.display.note)
                self.display.note(f"caches of this study's servers: {self.executor.cache_root}")
                self._seed_eta()
                self._start_slots()
                try:
                    self._recover_unfinished()
                    self._search()
                    self._validate_finalists()
                finally:
                    assert self._slots is not None
                    self._slots.stop()  # Ctrl-C, SIGTERM or an error: every slot's server stops
                self.session.end_reason = "finished"
            except _Pause:
                self.paused = True
                self.session.end_reason = "paused"
        result = analysis.analyze(self.store, self.spec)
        if self.session.end_reason == "finished":
            eta_seed.record_took(self.store)
        if not self.paused:
            self.store.set_verdict(Verdict(result.winner.key if result.winner else None, result.winner_reason))
        return result

    # --- the study's start and its phases -----------------------------------------------

    def _check_start(self, store: StudyStore) -> None:
        """A missing engine program or model is the study file's error (as `plan` says), at every
        start, a resume too: one line, not a failed boot per trial. A directory holding another
        study with a trial stops here too; this start's spec is stored once the flags passed as well."""
        plan.check_start(self.spec)
        check_same_study(store, self.spec, self.display.note)

    def _read_engine_defaults(self) -> None:
        # A misspelt flag stops the study before any boot, with nothing of this start kept: not
        # the defaults, not the spec, so the corrected study file starts this directory (identity.py).
        self.defaults = known.engine_defaults(self.store, list(self.spec.engine.command),
                                              lambda _command: self.engine.read_defaults(),
                                              check=lambda defaults: plan.check_flags(self.spec, defaults))
        store_spec(self.store, self.spec)  # the last of the start's checks passed
        if not self.defaults.known:
            self.display.note(f"engine defaults {self.defaults.source}: only boot logs tell configs apart")

    def _seed_eta(self) -> None:
        """Before the first boot: an ETA from the model's size and the scenarios, kept to be judged."""
        # A Hub id is read from the Hugging Face cache, as plan reads it (no network at the start).
        seed, basis = eta_seed.seed_for(locate(self.spec.engine.model, ask_hub=False), list(self.spec.scenarios))
        self.seed = seed
        eta_seed.store_seed(self.store, seed)
        if not self.store.trials():
            predicted = eta_seed.trials_s(self.spec, seed, analysis.planned_trial_count(self.store, self.spec),
                                          2 * self.spec.finalists, len(self.placements))
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
        for trial in self.session.reclaim(self.display.note, stop=self._slots.stop_leftovers):
            self.display.note(f"resuming trial #{trial.seq} ({trial.role}: {self._label(trial.config)})")
            self._resumes.append(trial)

    def _search(self) -> None:
        self._keep_slots_busy(phases.SearchPhase(self._study_state(), self.defaults or EngineDefaults()))

    def _validate_finalists(self) -> None:
        final = phases.FinalPhase(self._study_state())
        while final.next_round():
            self._keep_slots_busy(final)

    def _study_state(self) -> phases.StudyState:
        return phases.StudyState(self.store, self.spec, self.baseline_config, self._eta, self.display.note)

    # --- slots --------------------------------------------------------------------------

    def _keep_slots_busy(self, phase: phases.Phase) -> None:
        """Hand `phase`'s work to every free slot until no slot gets anything and none is busy.
        A --stop-after pause starts nothing more and lets the running trials end first."""
        pausing = False
        while True:
            if not pausing:
                try:
                    self._fill_free_slots(phase)
                except _Pause:
                    pausing = True
            if not self._busy:
                if pausing:
                    raise _Pause
                return
            self._wait_for_a_slot()

    def _fill_free_slots(self, phase: phases.Phase) -> None:
        for placement in self._live_slots():
            slot = placement.slot
            while slot not in self._busy:
                work = self._next_work(phase, slot)
                if work is None:
                    break
                if isinstance(work, Trial):
                    self._dispatch(slot, work)
                else:
                    self._start_trial(work, slot=slot)  # a trial decided without a boot leaves the slot free

    def _next_work(self, phase: phases.Phase, slot: int) -> Trial | phases.Work | None:
        """A resumed trial for `slot` first, then what the phase plans."""
        resumed = self._pop_resume(slot)
        if resumed is not None:
            return resumed
        live = self._live_slots()
        return phase.next_work(slot, phases.SlotsNow(live=len(live), running=len(self._busy),
                                                     live_ids=frozenset(p.slot for p in live)))

    def _start_trial(self, work: phases.Work, *, slot: int) -> None:
        self._pause_if_no_time()
        wipe = None if work.replaces is None else CacheRecord(wipe_before_boot=True, replaces_trial=work.replaces)
        trial = self.store.begin_trial(work.role, work.config, work.params, session_id=self.session.id, slot=slot,
                                       placement=self._placement(slot), cache=wipe)
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
        # A re-boot on a wiped cache is the measured config again on purpose: never "already known".
        is_candidate = trial.role is TrialRole.candidate and trial.replaces is None
        defaults = self.defaults or EngineDefaults()
        decided = (known.before_boot(self.store, trial.config, self.baseline_config, defaults, excluding=trial.id)
                   if is_candidate else None)
        if decided is None and trial.stopped_early is not None:
            # Stopped by racing before a kill: its runs stand, nothing more is booted.
            decided = Outcome.ok, trial.stopped_early
        if decided is not None:
            outcome, detail = decided
            self.store.finish_trial(trial.id, outcome, detail=detail)
            self.display.note(f"#{trial.seq} {trial.role} {label}: {outcome}, not booted: {escape(detail[:300])}")
            self._update_overview()
            return
        eta_now = time.time() + analysis.remaining_s(self.store, self.spec)
        self._log_eta(trial, eta_now)
        plan = TrialPlan(scenarios=screening.scenarios_for(self.spec, trial.role),
                         min_replicates=self.spec.replicates.min,
                         max_replicates=self.spec.replicates.max, capacity=capacity_trial.plan_for(self.spec),
                         goodput_slo=Objective(self.spec).goodput_limits())
        # Run by the driver (this thread) when the trial's slot asks: what needs the store.
        calls = SlotCalls(
            enough=lambda t, reps: analysis.enough_replicates(self.store, self.spec, t, reps),
            progress=lambda t, s, r, d, n: self._on_progress(t, label, s, r, d, n),
            duplicate_of=(lambda t, facts: known.after_boot(self.store, t, facts, self.baseline_config, defaults))
            if is_candidate else None,
            fits_of=lambda t, estimate: known.context_fit(self.store, t, estimate, self.baseline_config),
            race=lambda t, reps: racing.race(self.store, self.spec, t),
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
        if finished.outcome != Outcome.ok:
            self.display.note(f"[yellow]#{done.seq} {done.role} {label}: {finished.outcome}[/]{where} "
                              f"{escape((done.detail or '')[:300])}")
        else:
            boot = f"boot {done.boot_s:.0f} s, " if done.boot_s else ""
            took = f", {done.ended_at - done.started_at:.0f} s" if done.ended_at is not None else ""
            stopped = f"; {escape(done.stopped_early)}" if done.stopped_early else ""
            self.display.note(f"#{done.seq} {done.role} {label}: ok ({boot}"
                              f"{len(self.store.runs(done.id))} runs{took}){where}{stopped}")
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
        self.store.reopen_trial(trial.id, session_id=self.session.id)
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
        self.session.heartbeat()

    def _label(self, config: Config) -> str:
        """For the display, which reads rich markup: a value like `[/]` is text, not a tag."""
        return escape(config.label(self.baseline_config))

    # --- overview, ETA and --stop-after -------------------------------------------------

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

    def _log_eta(self, trial: Trial, predicted_end: float) -> None:
        self.store.log_eta(EtaEntry(trial.seq, time.time(), predicted_end))


class _Pause(Exception):
    """Raised before a trial when --stop-after leaves too little time for it."""
