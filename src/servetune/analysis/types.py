"""What a study concluded, as plain data: read by the runner (to name a winner) and the report."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..engine.config import Config
from ..stats.hierarchy import VarianceComponents
from ..store.model import TrialState
from ..study.metrics import higher_is_better
from ..vocabulary import Outcome


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval (NaN bounds when it cannot be computed)."""

    estimate: float
    low: float
    high: float
    n: int
    censored: str = ""    # right: a boot met every SLO at the search's top level (a lower bound);
                          # left: one failed at its first level (an upper bound); both; "": exact


@dataclass(frozen=True)
class Energy:
    """A config's energy on one scenario: joules of the slot's GPUs per output token over its runs
    (boots nested in the config, as every metric), and its reciprocal, output tokens per joule."""

    joules_per_token: Estimate
    tokens_per_joule: Estimate
    boots: int
    source: str            # how the runs' energy was read: "energy counter" | "power samples"


@dataclass(frozen=True)
class Effect:
    """Candidate versus baseline on one metric: effect in % of the baseline, with CI and p-values."""

    metric: str
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    p_value: float
    p_adjusted: float | None      # selection-calibrated (stats/pipeline.py) when judged boot against boot;
                                  # None for a screening comparison (a side has one boot)
    verdict: str                  # better | worse | no_difference (>= 2 boots on both sides);
                                  # promising | not_promising | no_difference (a single boot)
    unit: str = "single_boot"     # boot: judged boot against boot; single_boot: a side has one boot
    t: float = math.nan           # improvement / se on the log scale (positive: better)
    critical: float = math.nan    # the t a winner needs in this study's design, at these df (NaN: screening)
    level: float = math.nan       # the nominal one-sided p a winner needs in this design
    censored: str = ""            # right: the effect is a lower bound (a censored side); left: an upper one
    df: int = 0                   # boot-level df behind the comparison's variance


class SloState(StrEnum):
    """Where an SLO's interval lies against its limit (analysis/slo_proof.py)."""

    met = "met"               # wholly inside the limit
    unproven = "unproven"     # it straddles the limit, or there is no interval (too few values)
    violated = "violated"     # wholly outside it


@dataclass(frozen=True)
class SloCheck:
    """One SLO of one scenario judged on one config's runs: the statistic, its interval and the state."""

    scenario: str
    metric: str           # the study's key: p99_ttft_ms, output_throughput, ...
    limit: float
    estimate: float       # NaN: nothing to compute it from
    low: float            # the interval at the study's confidence (-inf / inf: unbounded, NaN: none)
    high: float
    state: SloState
    basis: str            # requests: per-request values pooled over boots; runs: one value per run,
                          # boots nested; capacity: some load level met every SLO; "": no value
    n: int = 0            # the values behind it (requests, ITL gaps or runs)

    @property
    def bound(self) -> str:
        """The limit as a reader reads it: ≤ for latencies, ≥ for throughputs."""
        if self.basis == "capacity":
            return "some load level meets every SLO"
        return f"{'≥' if higher_is_better(self.metric) else '≤'} {self.limit:g}"

    def text(self) -> str:
        """`a: p99_ttft_ms 5120 [4800, 8300] ≤ 5300 unproven` (the report's and a reason's words)."""
        if self.basis == "capacity":
            met = self.state is not SloState.violated
            return f"{self.scenario}: {self.bound if met else 'no load level met every SLO'}"
        if not math.isfinite(self.estimate):
            return f"{self.scenario}: {self.metric} has no value {self.bound}, {self.state}"
        return (f"{self.scenario}: {self.metric} {self.estimate:.4g} [{_bound(self.low)}, {_bound(self.high)}] "
                f"{self.bound}, {self.state}")


def _bound(x: float) -> str:
    return "?" if math.isnan(x) else "∞" if x == math.inf else "-∞" if x == -math.inf else f"{x:.4g}"


def worst_state(checks: Iterable[SloCheck]) -> SloState:
    """violated if any SLO is, else unproven if any is, else met (no SLO: met)."""
    states = {c.state for c in checks}
    return next((s for s in (SloState.violated, SloState.unproven) if s in states), SloState.met)


@dataclass(frozen=True)
class ClassStat:
    """One statistic of one class's requests: its estimate and interval (ms), over n values."""

    estimate: float
    low: float
    high: float
    n: int


@dataclass
class ClassResult:
    """One traffic class of a mixed scenario on one config."""

    name: str
    stats: dict[str, ClassStat]                                 # TABLE_KEYS -> the statistic
    slo_checks: list[SloCheck] = field(default_factory=list)   # the class's own SLOs, judged

    @property
    def requests(self) -> int:
        return max((s.n for k, s in self.stats.items() if "_itl_" not in k), default=0)

    @property
    def slo_state(self) -> SloState | None:
        """met, unproven or violated over the class's SLOs; None where it has none."""
        return worst_state(self.slo_checks) if self.slo_checks else None


@dataclass
class ScenarioResult:
    scenario: str
    replicates: int
    metrics: dict[str, Estimate]                  # vllm-bench field name -> estimate over replicates
    effects: dict[str, Effect] = field(default_factory=dict)   # vs baseline, per metric
    slo_checks: list[SloCheck] = field(default_factory=list)   # every SLO of the scenario (its classes' too), judged
    server: dict[str, Any] = field(default_factory=dict)       # mean of /metrics deltas and peaks
    classes: list[ClassResult] = field(default_factory=list)   # a mixed scenario's traffic classes apart

    @property
    def slo_violations(self) -> list[str]:
        """The SLOs whose interval lies wholly outside the limit, as text."""
        return [c.text() for c in self.slo_checks if c.state is SloState.violated]


@dataclass
class ConfigResult:
    key: str
    config: Config
    params: dict[str, Any]
    label: str
    trial_ids: list[int]
    outcome: Outcome | TrialState                 # ok, the failure class of its last trial, or running
    scenarios: dict[str, ScenarioResult] = field(default_factory=dict)
    objective: Estimate | None = None             # ratio to the baseline (the baseline: exactly 1.0)
    objective_samples: list[float] = field(default_factory=list)
    objective_boots: list[list[float]] = field(default_factory=list)  # per boot, its replicates' samples
    objective_censored: list[str] = field(default_factory=list)   # per boot: "" exact, right / left: a bound
    boot_samples: list[float] = field(default_factory=list)   # one objective mean per boot
    objective_effect: Effect | None = None
    feasible: bool = True        # ran, and no SLO is violated (the search's constraint; a winner needs slo_state met)
    is_baseline: bool = False
    is_finalist: bool = False
    stopped_early: str | None = None   # racing stopped its screening boot (tune/racing.py): never a finalist
    unfinished_trial_ids: list[int] = field(default_factory=list)   # stopped mid-trial: resumed by `servetune tune`
    # Trial id -> how its machine differs from its baseline's (analysis/machine_check.py): left out of every estimate.
    unlike_machine: dict[int, list[str]] = field(default_factory=dict)
    energy: dict[str, Energy] = field(default_factory=dict)         # per scenario, where the runs read energy

    @property
    def ok(self) -> bool:
        """Some boot of the config ran to the end with outcome ok."""
        return self.outcome == Outcome.ok

    @property
    def slo_checks(self) -> list[SloCheck]:
        return [c for s in self.scenarios.values() for c in s.slo_checks]

    @property
    def slo_state(self) -> SloState:
        """met only when every SLO of every scenario is (at the study's confidence)."""
        return worst_state(self.slo_checks)

    @property
    def measured(self) -> bool:
        """At least one run of one scenario produced a measurement (a config that never ran has none)."""
        return any(s.replicates > 0 for s in self.scenarios.values())


@dataclass
class DriftPoint:
    trial_id: int
    seq: int
    at: float                                      # unix time the trial started
    scenario: str
    metric: str
    value: float


@dataclass
class StudyAnalysis:
    study_name: str
    objective_metric: str
    objective_direction: str                       # maximize | minimize
    baseline: ConfigResult | None
    configs: list[ConfigResult]                    # baseline first, then in first-trial order
    winner: ConfigResult | None
    winner_reason: str
    drift: list[DriftPoint] = field(default_factory=list)
    cost: dict[str, float] = field(default_factory=dict)   # boot_s, measure_s, other_s, wall_s, eta_error_pct
    confidence: float = 0.95                       # level of every interval: 1 - the study's alpha
    components: VarianceComponents | None = None   # boot and replicate variance of the objective (log scale)
    objective_per_gpu: bool = False                # the objective divided by each config's GPUs per server

    @property
    def objective_name(self) -> str:
        """The objective as a reader should read it: `output_throughput per GPU` under per_gpu."""
        return f"{self.objective_metric} per GPU" if self.objective_per_gpu else self.objective_metric

    @property
    def baseline_measured(self) -> bool:
        """Without a measured baseline nothing can be compared: no verdict, no recommended config."""
        return self.baseline is not None and self.baseline.measured

    @property
    def unfinished_trial_ids(self) -> list[int]:
        """Trials stopped mid-way (resumed by `servetune tune`): until they end, "nothing beat the
        baseline" is only "nothing yet", since one may be the finalist or baseline boot a verdict needs."""
        return sorted(t for c in self.configs for t in c.unfinished_trial_ids)
