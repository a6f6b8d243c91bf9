"""AbRunner: boots the two engines alternately (A B A B ...), each boot measuring every scenario
with replicates, into one study store, so a killed A/B resumes where it stopped.

The boot order is a pure function of the store (the k-th trial is side SIDES[k % 2]), so a
resumed A/B continues the alternation exactly; a trial left running by a killed tuner is
stopped and booted again (its stored runs count), as in a study.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.markup import escape

from ..engine import engine_for
from ..engine.defaults import EngineDefaults
from ..errors import ServetuneError
from ..load.records import RunResult
from ..load.scenario import Scenario
from ..machine import RunMachine, RunSampler
from ..store import StudyStore, Trial, TrialRole
from ..study.spec import SpecError
from ..tune import plan
from ..tune.display import StudyDisplay
from ..tune.session import TunerSession
from ..tune.trial import ProgressFn, TrialExecutor, TrialPlan
from ..vocabulary import Outcome
from . import prefix_reuse
from .analysis import DEFAULTS_META_KEY, AbAnalysis, analyze
from .spec import SIDES, AbSpec

ROLES = {"A": TrialRole.ab_a, "B": TrialRole.ab_b}
SIDE_OF_ROLE = {role: side for side, role in ROLES.items()}
META_KEY = "ab"
BOOTS_MAY_CHANGE = "boots"  # a resumed A/B may get more boots, nothing else


def boot_order(boots: int) -> list[str]:
    """A B A B ...: each side's boots spread over the whole A/B, so drift of the machine hits both."""
    return [side for _ in range(boots) for side in SIDES]


class AbTrialExecutor(TrialExecutor):
    """A TrialExecutor that also measures the prefix-reuse pairs (a scenario of its own kind)."""

    def _run_once(self, trial: Trial, url: str, api_key: str | None, model: str, scenario: Scenario,
                  replicate: int, attempt: int, progress: ProgressFn,
                  kv_cache_tokens: int | None, goodput_slo: dict[str, float] | None,
                  ) -> tuple[RunResult, float, RunMachine | None]:
        if not isinstance(scenario, prefix_reuse.PrefixReuse):
            return super()._run_once(trial, url, api_key, model, scenario, replicate, attempt, progress,
                                     kv_cache_tokens, goodput_slo)
        progress(trial, scenario.name, replicate, 0, 1)
        started_at = time.time()
        with RunSampler(self._env(), cpus=self._cpus()) as sampler:
            result = prefix_reuse.measure(url, model, scenario, tokenizer_dir=self.tokenizer_dir, api_key=api_key)
        return result, started_at, sampler.result


class AbRunner:
    def __init__(self, spec: AbSpec, out_dir: Path, *, boots: int, reuse: prefix_reuse.PrefixReuse | None,
                 metrics: list[str], display: StudyDisplay, allow_busy: bool = False):
        self.spec, self.out_dir, self.boots, self.display = spec, Path(out_dir), boots, display
        self.reuse, self.metrics = reuse, metrics
        self.engines = {side: engine_for(spec.side(side).engine) for side in SIDES}
        # The lock first; each side's engine command, model and flags are checked before the A/B is stored.
        self.session = TunerSession.open(self.out_dir, self._check_start)
        self.store = self.session.store
        for engine in self.engines.values():
            engine.check_secrets()  # a missing secret stops here, before any boot
        self.store.redact = lambda text: self.engines["B"].redact(self.engines["A"].redact(text))
        # Each side its own caches (cache-A/, cache-B/): one engine's compiled kernels never reach the other's boots.
        self.executors = {side: AbTrialExecutor.for_study(self.engines[side], spec.side(side), self.store,
                                                          self.out_dir, cache_dir=f"cache-{side}") for side in SIDES}
        for executor in self.executors.values():
            executor.allow_busy = allow_busy  # --allow-busy-gpu

    def run(self) -> AbAnalysis:
        with self.session.running(), self.display:
            for trial in self.session.reclaim(self.display.note):
                self.display.note(f"resuming boot #{trial.seq} ({SIDE_OF_ROLE.get(trial.role, trial.role)})")
                self._execute(trial)
            order = boot_order(self.boots)
            while (done := len(self.store.trials())) < len(order):
                side = order[done]
                trial = self.store.begin_trial(ROLES[side], self.spec.side(side).baseline_config(),
                                               {"side": side}, session_id=self.session.id)
                self._execute(trial)
            self.session.end_reason = "finished"
        return analyze(self.store, self.spec, self.metrics)

    def _plan(self) -> TrialPlan:
        work = self.spec.workload
        scenarios = [*work.scenarios, *([self.reuse] if self.reuse else [])]
        return TrialPlan(scenarios=scenarios, min_replicates=work.replicates.max, max_replicates=work.replicates.max)

    def _execute(self, trial: Trial) -> None:
        side = SIDE_OF_ROLE[trial.role]
        total = len(boot_order(self.boots))
        self.display.trials(len([t for t in self.store.trials() if t.done]), total, None)
        outcome = self.executors[side].run(
            trial, self._plan(), enough=lambda t, reps: False,
            progress=lambda t, s, r, d, n: self._on_progress(t, side, s, r, d, n))
        done = self.store.trial(trial.id)
        if outcome != Outcome.ok:
            self.display.note(f"[yellow]#{trial.seq} {side}: {outcome}[/] {escape((done.detail or '')[:300])}")
        else:
            version = (done.boot_facts.engine_version if done.boot_facts else None) or "version ?"
            self.display.note(f"#{trial.seq} {side} ({escape(version)}): ok (boot {done.boot_s or 0:.0f} s, "
                              f"{len(self.store.runs(trial.id))} runs)")
        self.display.trials(len([t for t in self.store.trials() if t.done]), total, None)

    def _on_progress(self, trial: Trial, side: str, scenario: str | None, replicate: int, done: int,
                     total: int) -> None:
        self.display.trial_step(trial, side, scenario, replicate, done, total)
        self.session.heartbeat()

    def _check_start(self, store: StudyStore) -> None:
        """Each side's engine command and model, then its flags against that side's engine's
        defaults, as `tune` checks a study's (plan.check_start, plan.check_flags), at every start,
        a resume too: located lines and exit 2 before anything boots, instead of a failed boot per
        side. Checked before the A/B is stored, so the corrected file then starts this directory's
        A/B. The defaults are read at each start with each side's own interpreter, once for sides
        of one engine kind and command (a subprocess of ~10 s each for vLLM: the usual A/B compares
        flags of one engine), and stored once the A/B is: the report compares them (ab.config_diff)."""
        lines: list[str] = []
        defaults: dict[tuple[str, ...], EngineDefaults] = {}
        by_side: dict[str, EngineDefaults] = {}
        for side in SIDES:
            try:
                plan.check_start(self.spec.side(side))
                engine = self.spec.side(side).engine
                key = (engine.kind, *engine.command)
                if key not in defaults:
                    defaults[key] = self.engines[side].read_defaults()
                by_side[side] = defaults[key]
                plan.check_flags(self.spec.side(side), defaults[key])
            except SpecError as exc:
                lines += self.spec.located(side, exc.problems)
        if lines:  # one file's shared engine key fails on both sides: said once
            raise ServetuneError("\n".join(dict.fromkeys(lines)))
        self._check_same_ab(store)
        store.set_meta_json(DEFAULTS_META_KEY, {s: d.model_dump(mode="json") for s, d in by_side.items()})

    def _check_same_ab(self, store: StudyStore) -> None:
        new = {"A": self.spec.a.model_dump(mode="json"), "B": self.spec.b.model_dump(mode="json"),
               "prefix_reuse": self.reuse.model_dump(mode="json") if self.reuse else None, "boots": self.boots}
        old = store.get_meta_json(META_KEY)
        if old is None and store.trials():
            raise ServetuneError(f"{store.path}: this directory holds a study, not an A/B; use another --out")
        changed = [k for k in new if k != BOOTS_MAY_CHANGE and old is not None and old.get(k) != new[k]]
        if changed:
            raise ServetuneError(f"{store.path}: this directory holds a different A/B (changed: "
                                 f"{', '.join(changed)}); use another --out, or the files it was started with")
        store.set_meta_json(META_KEY, new)
