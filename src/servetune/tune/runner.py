"""StudyRunner: the only place that wires engine, load, store and search together.

The sequence of trials is a pure function of what the store holds (strategies are
deterministic given the history and seed; the finalist plan is written to the store before it
starts), so running the same command after a kill continues exactly where the study stopped.
"""

from __future__ import annotations

from collections import Counter
import signal
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..engine import Engine, engine_for
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..engine.outcome import Outcome
from ..errors import ServetuneError
from ..search import make_strategy
from ..store import StudyStore, TrialRole, TrialRow
from ..study.spec import StudySpec
from . import analysis, capacity_trial, known
from . import eta as eta_seed
from .display import StudyDisplay
from .eta import estimate
from .lock import StudyLock, TunerProcess
from .recovery import reclaim_unfinished
from .trial import TrialExecutor, TrialPlan

SPEC_KEYS_THAT_MAY_CHANGE = ("budget",)  # a resumed study may get more budget, nothing else


class StudyRunner:
    def __init__(self, spec: StudySpec, out_dir: Path, *, display: StudyDisplay, stop_after_s: float | None = None):
        self.spec = spec
        self.out_dir = Path(out_dir)
        self.display = display
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
        self.executor = TrialExecutor.for_study(self.engine, spec, self.store, self.out_dir)
        self.baseline_config = spec.baseline_config()
        self.defaults: EngineDefaults | None = None  # read in run(): a subprocess of ~10 s
        self.seed: eta_seed.Eta | None = None  # the ETA before anything is measured, set in run()
        self._session = 0
        self._last_heartbeat = 0.0
        self._deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
        self.paused = False

    # --- entry point --------------------------------------------------------------------

    def run(self) -> analysis.StudyAnalysis:
        me = TunerProcess.current()
        self._session = self.store.begin_session(pid=me.pid, host=me.host, pid_create_time=me.pid_create_time)
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
        reason = "interrupted"
        try:
            with self.display:
                try:
                    self._read_engine_defaults()
                    self._seed_eta()
                    self._recover_unfinished()
                    self._ensure_baseline()
                    self._search()
                    self._validate_finalists()
                    reason = "finished"
                except _Pause:
                    self.paused = True
                    reason = "paused"
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.store.end_session(self._session, reason)
            self._lock.release()
        result = analysis.analyze(self.store, self.spec)
        if reason == "finished":
            eta_seed.record_took(self.store)
        if not self.paused:
            self.store.set_meta_json("verdict", {"winner": result.winner.key if result.winner else None,
                                                 "reason": result.winner_reason})
        return result

    # --- phases -------------------------------------------------------------------------

    def _read_engine_defaults(self) -> None:
        self.defaults = known.engine_defaults(self.store, list(self.spec.engine.command),
                                              lambda _command: self.engine.read_defaults())
        if not self.defaults.known:
            self.display.note(f"engine defaults {self.defaults.source}: only boot logs tell configs apart")

    def _seed_eta(self) -> None:
        """Before the first boot: an ETA from the model's size and the scenarios, kept to be judged."""
        seed, basis = eta_seed.seed(Path(self.spec.engine.model), list(self.spec.scenarios))
        self.seed = seed
        eta_seed.store_seed(self.store, seed)
        if not self.store.trials():
            predicted = analysis.planned_trial_count(self.store, self.spec) * seed.trial_s(
                self.spec.scenario_names, self.spec.replicates.min)
            eta_seed.record_first_estimate(self.store, predicted, basis, at=time.time())
            self.display.note(f"first estimate {predicted / 60:.1f} min ({basis}, boot ~{seed.boot_s:.0f} s)")

    def _recover_unfinished(self) -> None:
        """A killed predecessor may have left a trial `running` and its server alive."""
        for trial in reclaim_unfinished(self.store, self._session, self.display.note):
            self.display.note(f"resuming trial #{trial.seq} ({trial.role}: {self._label(trial.config)})")
            self._execute(trial)

    def _ensure_baseline(self) -> None:
        if not self.store.trials(TrialRole.baseline):
            self._start_trial(TrialRole.baseline, self.baseline_config, {})

    def _search(self) -> None:
        strategy = make_strategy(self.spec)
        while True:
            candidates = [t for t in self.store.trials(TrialRole.candidate) if known.was_booted(t)]
            if self.spec.budget.trials is not None and len(candidates) >= self.spec.budget.trials:
                self.display.note(f"trial budget reached ({self.spec.budget.trials} candidates)")
                return
            if not self._time_left_for_another():
                self.display.note("wall-clock budget reached")
                return
            if self._candidates_since_baseline() >= self.spec.baseline_every:
                self._start_trial(TrialRole.baseline_check, self.baseline_config, {})
                continue
            proposal = strategy.propose(analysis.history(self.store, self.spec))
            if proposal is None:
                self.display.note("search strategy finished: nothing left to try")
                return
            self._start_trial(TrialRole.candidate, self.spec.config_for(proposal.params), proposal.params)

    def _validate_finalists(self) -> None:
        plan = self.store.get_meta_json("final_plan")
        if plan is None:
            keys = analysis.pick_finalists(self.store, self.spec, self.spec.finalists)
            plan = []
            for key in keys:
                plan += [[TrialRole.baseline_final, self.baseline_config.key()], [TrialRole.finalist, key]]
            if not keys and self.spec.finalists > 0 and self._baseline_boot_variance_unknown():
                # Every verdict carries boot-to-boot variance, learnt from a config booted twice;
                # `finalists: 0` asks for no boot after the search, so it gets none.
                plan = [[TrialRole.baseline_final, self.baseline_config.key()]]
            self.store.set_meta_json("final_plan", plan)
            if not keys:
                self.display.note("no candidate beat the baseline's point estimate: no finalists to re-validate"
                                  + ("; one more baseline boot to measure boot-to-boot variance" if plan else ""))
        configs = {t.config.key(): t for t in self.store.trials()}
        done = [t for t in self.store.trials() if t.role.is_validation]
        for role, key in plan[len(done):]:
            source = configs[key]
            self._start_trial(TrialRole(role), source.config, source.params)

    def _baseline_boot_variance_unknown(self) -> bool:
        """True when candidates were measured but no config has two measured boots yet."""
        ok = [t for t in self.store.trials() if t.ok]
        if not any(t.role is TrialRole.candidate for t in ok):
            return False
        boots = Counter(t.config.key() for t in ok)
        return max(boots.values()) < 2

    # --- trials -------------------------------------------------------------------------

    def _start_trial(self, role: TrialRole, config: Config, params: dict[str, Any]) -> None:
        self._pause_if_no_time()
        trial = self.store.begin_trial(role, config, params, session_id=self._session)
        self._execute(trial)

    def _execute(self, trial: TrialRow) -> None:
        self._update_overview()
        label = self._label(trial.config)
        is_candidate = trial.role is TrialRole.candidate
        defaults = self.defaults or EngineDefaults()
        decided = known.before_boot(self.store, trial, self.baseline_config, defaults) if is_candidate else None
        if decided is not None:
            outcome, detail = decided
            self.store.finish_trial(trial.id, outcome, detail=detail)
            self.display.note(f"#{trial.seq} {trial.role} {label}: {outcome}, not booted: {escape(detail[:300])}")
            self._update_overview()
            return
        eta_now = time.time() + analysis.remaining_s(self.store, self.spec)
        self._log_eta(trial, eta_now)
        outcome = self.executor.run(
            trial,
            TrialPlan(scenarios=list(self.spec.scenarios), min_replicates=self.spec.replicates.min,
                      max_replicates=self.spec.replicates.max, capacity=capacity_trial.plan_for(self.spec)),
            enough=lambda t, reps: analysis.enough_replicates(self.store, self.spec, t, reps),
            progress=lambda t, s, r, d, n: self._on_progress(t, label, s, r, d, n),
            duplicate_of=(lambda t, facts: known.after_boot(self.store, t, facts, self.baseline_config, defaults))
            if is_candidate else None,
            fits_of=lambda t, estimate: known.context_fit(self.store, t, estimate, self.baseline_config),
        )
        done = self.store.trial(trial.id)
        if outcome != Outcome.ok:
            self.display.note(f"[yellow]#{trial.seq} {trial.role} {label}: {outcome}[/] {escape((done.detail or '')[:300])}")
        else:
            boot = f"boot {done.boot_s:.0f} s, " if done.boot_s else ""
            self.display.note(f"#{trial.seq} {trial.role} {label}: ok ({boot}"
                              f"{len(self.store.runs(trial.id))} runs, {done.ended_at - done.started_at:.0f} s)")
        self._update_overview()

    def _on_progress(self, trial: TrialRow, label: str, scenario: str | None, replicate: int,
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

    def _pause_if_no_time(self) -> None:
        """With --stop-after, do not start a boot that cannot finish: a cut trial costs a second boot."""
        if self._deadline is None:
            return
        eta = estimate(self.store.trials(), self.store.runs(), self.seed)
        if not eta.measured:
            return  # nothing measured yet: no basis for a decision, so try
        needed = eta.trial_s(self.spec.scenario_names, self.spec.replicates.min)
        if time.monotonic() + needed > self._deadline:
            self.display.note(f"pausing: the next trial needs ~{needed:.0f} s, fewer are left")
            raise _Pause

    def _time_left_for_another(self) -> bool:
        eta = estimate(self.store.trials(), self.store.runs(), self.seed)
        if self.spec.budget.wall_minutes is None:
            return True
        per_trial = eta.trial_s(self.spec.scenario_names, self.spec.replicates.min)
        reserve = 2 * self.spec.finalists * per_trial  # finalists and their baseline boots
        return self.store.elapsed_wall_s() + per_trial + reserve <= self.spec.budget.wall_minutes * 60

    def _candidates_since_baseline(self) -> int:
        count = 0
        for trial in reversed(self.store.trials()):
            if trial.role.is_baseline:
                break
            if trial.role is TrialRole.candidate and known.was_booted(trial):
                count += 1
        return count

    def _log_eta(self, trial: TrialRow, predicted_end: float) -> None:
        log = self.store.get_meta_json("eta_log") or []
        log.append({"trial_seq": trial.seq, "at": time.time(), "predicted_end": predicted_end})
        self.store.set_meta_json("eta_log", log)

    # --- identity -----------------------------------------------------------------------

    def _check_same_study(self) -> None:
        new = self.spec.model_dump(mode="json")
        old = self.store.get_meta_json("spec")
        if old is None:
            self.store.set_meta_json("spec", new)
            return
        # A key the stored spec lacks was added by a newer servetune: its default is not a change.
        changed = [k for k in sorted(set(old) | set(new))
                   if k not in SPEC_KEYS_THAT_MAY_CHANGE and k in old and old.get(k) != new.get(k)]
        if changed:
            raise ServetuneError(
                f"{self.store.path}: this directory holds a different study (changed: {', '.join(changed)}); "
                "use another --out directory, or restore the study file it was started with"
            )
        self.store.set_meta_json("spec", new)


class _Pause(Exception):
    """Raised before a trial when --stop-after leaves too little time for it."""


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run ends through the same cleanup (session ended, server stopped)."""
    raise KeyboardInterrupt(f"signal {signum}")
