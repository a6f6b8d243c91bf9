"""What a study boots next, phase by phase; the runner (tune/runner.py) hands it to a slot.

The search: each slot's own baseline first, a baseline re-measurement every `baseline_every`
booted candidates on that slot, else the strategy's next candidate (it sees the trials running
elsewhere), until the trial or wall-clock budget or the strategy ends it. Re-validation after it:
the finalist plan (each finalist beside a fresh baseline boot on the same slot) written to the
store before its first boot, then, while the leading finalist is undecided, one more baseline and
leader pair appended to it. In both, a boot far from its config's other boots is excluded and its
config booted again on a wiped cache before anything else (analysis/outliers.py). Every answer is a
function of the store's contents, so a resumed study plans what the killed one would have.

A phase only plans: beginning the trial, a resumed trial first, and recording what it ends with
are the runner's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.markup import escape

from ..analysis import analysis, known, outliers, revalidation, verdict_rule
from ..analysis import eta as eta_seed
from ..engine.config import Config
from ..engine.defaults import EngineDefaults
from ..search import Strategy, TrialView, make_strategy, stopping
from ..store import PlannedTrial, SearchStop, StudyStore, TrialRole
from ..study.spec import StudySpec


@dataclass(frozen=True)
class Work:
    """A trial to begin: why it boots, its config, and the strategy's params for it; `replaces`:
    the seq of the excluded boot it is booted for, on a wiped cache (analysis/outliers.py)."""

    role: TrialRole
    config: Config
    params: dict[str, Any] = field(default_factory=dict)
    replaces: int | None = None


@dataclass(frozen=True)
class SlotsNow:
    """What a phase may know of the slots when asked: how many are live, how many run a trial, and
    which are live (empty: not told, as where a caller has one slot)."""

    live: int
    running: int
    live_ids: frozenset[int] = frozenset()


class Phase(Protocol):
    def next_work(self, slot: int, slots: SlotsNow) -> Work | None:
        """What `slot` begins next; None for nothing now (asked again once a running trial ends)."""
        ...


@dataclass(frozen=True)
class StudyState:
    """What the phases read: the store, the study, its baseline, the ETA now, and where notes go."""

    store: StudyStore
    spec: StudySpec
    baseline: Config
    eta: Callable[[], eta_seed.Eta]
    note: Callable[[str], None]

    def reboot(self, slot: int, slots: SlotsNow) -> Work | None:
        """A far boot's re-boot on a wiped cache, before any other work (analysis/outliers.py). The far
        boot is excluded as soon as it is found; its re-boot waits for the slot that measured it,
        whose cache it wipes (another slot takes it only when that one is gone)."""
        found = outliers.next_reboot(self.store, self.spec)
        if found is None:
            return None
        trial = found.trial
        if found.exclusion is not None:
            self.store.exclude_trial(trial.id, found.exclusion)
            self.note(escape(outliers.describe(trial, found.exclusion)))
        if trial.slot != slot and trial.slot in slots.live_ids:
            return None
        return Work(trial.role, trial.config, trial.params, replaces=trial.seq)


class SearchPhase:
    """The search: baselines, their re-measurements and the strategy's candidates, within budget."""

    def __init__(self, study: StudyState, defaults: EngineDefaults):
        self.study = study
        self.defaults = defaults
        self.strategy: Strategy = make_strategy(study.spec)
        self.over = False

    def next_work(self, slot: int, slots: SlotsNow) -> Work | None:
        """`slot`'s own baseline, a baseline re-measurement, or the strategy's next candidate."""
        store, spec, baseline = self.study.store, self.study.spec, self.study.baseline
        if not self._slot_has_baseline(slot):
            return Work(TrialRole.baseline, baseline)
        reboot = self.study.reboot(slot, slots)
        if reboot is not None:
            return reboot
        if self.over:
            return None
        candidates = [t for t in store.trials(TrialRole.candidate) if known.was_booted(t) and t.replaces is None]
        if spec.budget.trials is not None and len(candidates) >= spec.budget.trials:
            self._end(f"trial budget reached ({spec.budget.trials} candidates)")
            return None
        if not self._time_left_for_another(slots.live):
            self._end("wall-clock budget reached")
            return None
        history = analysis.history(store, spec)
        if self._stopped(history):
            return None
        # Asked before a re-measurement is due: a check is booted only before a candidate that
        # boots, so a search that has run dry boots none after its last candidate (a budget-limited
        # one has none either), and a candidate the store already decides goes first. Strategies
        # keep no state, so the answer is asked again after the check.
        proposal = self.strategy.propose(history)
        if proposal is None and not slots.running:
            self._end("search strategy finished: nothing left to try")
            return None
        check_due = self._candidates_since_baseline(slot) >= spec.baseline_every
        if proposal is None:  # the strategy waits for the running trials (ofat): asked again after one ends
            return Work(TrialRole.baseline_check, baseline) if check_due else None
        candidate = spec.config_for(proposal.params)
        if check_due and self._would_boot(candidate):
            return Work(TrialRole.baseline_check, baseline)
        return Work(TrialRole.candidate, candidate, proposal.params)

    def _end(self, why: str) -> None:
        self.over = True
        self.study.note(why)

    def _stopped(self, history: list[TrialView]) -> bool:
        """The stopping rule ends the search (search/stopping.py): recorded once, with why; a
        resumed study finds the record and boots no further candidate, unless its study file now
        has a stricter rule than the recorded chance (or none): then the search goes on."""
        store, spec = self.study.store, self.study.spec
        if spec.stopping.chance_below is None:
            return False
        recorded = store.search_stop()
        if recorded is not None and (recorded.chance or 0.0) < spec.stopping.chance_below:
            self._end(escape(f"search stopped by its rule: {recorded.reason}"))
            return True
        state = stopping.assess(spec, history)
        if not state.stops:
            return False
        reason = state.line(spec.min_effect_pct)
        store.set_search_stop(SearchStop(reason, state.chance, spec.stopping.chance_below, len(store.trials())))
        self._end(escape(f"search stopped by its rule: {reason}"))
        return True

    def _would_boot(self, candidate: Config) -> bool:
        return known.before_boot(self.study.store, candidate, self.study.baseline, self.defaults) is None

    def _time_left_for_another(self, live_slots: int) -> bool:
        spec = self.study.spec
        if spec.budget.wall_minutes is None:
            return True
        eta = self.study.eta()
        per_trial = eta_seed.next_trial_s(spec, eta)
        # finalists and their baseline boots, in full
        reserve = 2 * spec.finalists * eta_seed.next_trial_s(spec, eta, validation=True) / live_slots
        return self.study.store.elapsed_wall_s() + per_trial + reserve <= spec.budget.wall_minutes * 60

    def _slot_has_baseline(self, slot: int) -> bool:
        """A slot's first trial is the baseline there (begun: it may still be running)."""
        return any(t.role.is_baseline and t.slot == slot for t in self.study.store.trials())

    def _candidates_since_baseline(self, slot: int) -> int:
        """Booted candidates on `slot` since its last baseline boot: `baseline_every` counts per slot."""
        count = 0
        for trial in reversed(self.study.store.trials()):
            if trial.slot != slot:
                continue
            if trial.role.is_baseline:
                break
            if trial.role is TrialRole.candidate and known.was_booted(trial) and trial.replaces is None:
                count += 1
        return count


class FinalPhase:
    """Re-validation in rounds. The first round runs the stored final plan's boots not yet begun
    (the plan is made and stored first when there is none); each further round, while the
    leading finalist is undecided, one more baseline and leader pair appended to the stored plan."""

    def __init__(self, study: StudyState):
        self.study = study
        self.plan: list[PlannedTrial] | None = None
        self._left: list[Work] = []                  # this round's boots, in plan order
        self._queued: dict[int, list[Work]] = {}     # a finalist waits for its baseline on the same slot

    def next_round(self) -> bool:
        """Set up the next round: True to run it (the first always: resumed trials run in it),
        False when re-validation stops."""
        if self.plan is None:
            self.plan = self._stored_or_new_plan()
        else:
            leader = self._next_revalidation()
            if leader is None:
                return False
            self.plan = [*self.plan, PlannedTrial(TrialRole.baseline_final, self.study.baseline.key()),
                         PlannedTrial(TrialRole.finalist, leader)]
            self.study.store.set_final_plan(self.plan)   # before the boots: a resume continues the same plan
        self._left = self._not_begun(self.plan)
        return True

    def next_work(self, slot: int, slots: SlotsNow) -> Work | None:
        """The next boot of the round for `slot`. A finalist runs on the slot that has just booted
        the baseline for it, right after it: the comparison it is made for."""
        queued = self._queued.setdefault(slot, [])
        if not queued and (reboot := self.study.reboot(slot, slots)) is not None:
            return reboot
        if not queued and self._left:
            queued.append(self._left.pop(0))
            if queued[0].role is TrialRole.baseline_final and self._left and self._left[0].role is TrialRole.finalist:
                queued.append(self._left.pop(0))
        return queued.pop(0) if queued else None

    def _stored_or_new_plan(self) -> list[PlannedTrial]:
        store, spec, baseline = self.study.store, self.study.spec, self.study.baseline
        plan = store.final_plan()
        if plan is not None:
            return plan
        keys = analysis.pick_finalists(store, spec, spec.finalists)
        plan = []
        for key in keys:
            plan += [PlannedTrial(TrialRole.baseline_final, baseline.key()), PlannedTrial(TrialRole.finalist, key)]
        if not keys and spec.finalists > 0 and self._baseline_boot_variance_unknown():
            # Every verdict carries boot-to-boot variance, learnt from a config booted twice;
            # `finalists: 0` asks for no boot after the search, so it gets none.
            plan = [PlannedTrial(TrialRole.baseline_final, baseline.key())]
        store.set_final_plan(plan)
        if spec.finalists == 0:
            self.study.note("finalists: 0: no candidate is re-validated on a fresh boot")
        elif not keys:
            self.study.note("no candidate beat the baseline's point estimate: no finalists to re-validate"
                            + ("; one more baseline boot to measure boot-to-boot variance" if plan else ""))
        return plan

    def _not_begun(self, plan: list[PlannedTrial]) -> list[Work]:
        """The plan's boots after those already begun (validation trials are begun in plan order)."""
        trials = self.study.store.trials()
        configs = {t.config.key(): t for t in trials}
        begun = [t for t in trials if t.role in (TrialRole.finalist, TrialRole.baseline_final) and t.replaces is None]
        return [Work(role, configs[key].config, configs[key].params) for role, key in plan[len(begun):]]

    def _next_revalidation(self) -> str | None:
        """The leading finalist to boot again with the baseline (re-validation until decided), or None."""
        store, spec = self.study.store, self.study.spec
        look = revalidation.next_look(analysis.analyze(store, spec), spec, verdict_rule.revalidation_cap(store))
        if look.leader is None:    # nothing re-validated (finalists: 0, no finalist): nothing to say
            return None
        if look.key is not None and not self._time_left_for_pair():
            self.study.note(escape(f"{look.line()}; but the wall-clock budget leaves no time for another boot pair"))
            return None
        self.study.note(escape(look.line()))
        return look.key

    def _time_left_for_pair(self) -> bool:
        spec = self.study.spec
        if spec.budget.wall_minutes is None:
            return True
        per_trial = eta_seed.next_trial_s(spec, self.study.eta(), validation=True)
        return self.study.store.elapsed_wall_s() + 2 * per_trial <= spec.budget.wall_minutes * 60

    def _baseline_boot_variance_unknown(self) -> bool:
        """True when candidates were measured but no config has two measured boots yet."""
        ok = [t for t in self.study.store.trials() if t.ok]
        if not any(t.role is TrialRole.candidate for t in ok):
            return False
        boots = Counter(t.config.key() for t in ok)
        return max(boots.values()) < 2
