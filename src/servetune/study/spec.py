"""The study file: what to tune (engine, Space, constraints), on which traffic (Scenarios), for what
(objective, SLOs), how (strategy, replicates, budget). Validated with pydantic; loaded by `load_study`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..capacity.sequential import LOOKS_PER_RUN, Looks
from ..capacity.slo import class_slo, per_request_limits, requests_to_meet, slo_from_key, slos_from_limits
from ..engine.config import Config, EnvName, FlagValue, check_env_name, is_env_name, normalize_flag_name
from ..engine.knobs import DeclaredEvidence
from ..engine.profile import Capability, EngineProfile
from ..errors import ServetuneError
from ..load.classes import class_names
from ..load.scenario import PRESETS, Scenario
from ..load.trace.window import load_replay
from ..secrets import Secrets, flag_value_secret, is_secret_name
from ._hints import did_you_mean
from .constraints import ORDER_OPS, Constraint, config_value, violations
from .metrics import CAPACITY, GOODPUT, check_metric, higher_is_better, metric_problem
from .space import ENGINE_KIND_PARAM, ENV_PREFIX, Parameter, env_var, is_number, json_field, normalize_param_name

# Validation context keys: the spec is read back from a store (StudySpec.from_store); the engine
# kinds and strategy names registered, which the loader (study/loader.py) hands in so that this
# module checks names without importing either registry (both import this module's types); an
# engine's profile (reserved args, secret flags, default command: data) is looked up lazily.
STORED = "stored"
ENGINE_KINDS = "engine_kinds"
STRATEGY_NAMES = "strategy_names"

Loc = tuple[Any, ...]


def registered(name: str, info: ValidationInfo, key: str, what: str) -> str:
    """`name` when the registry's names in the validation context (`key`) hold it; a spec validated
    without them (read back from a store, or built in code) is checked where it is built
    (engine_for, make_strategy)."""
    known = (info.context or {}).get(key)
    if known is not None and name not in known:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return name


MAX_REPLICATES = 1000  # more runs on one boot is a typo, not a plan


def _profile(kind: object) -> EngineProfile:
    """A kind's profile (vLLM's for a kind the `kind` field reports as unknown)."""
    from ..engine.registry import PROFILES  # the registry imports this module's types
    return PROFILES.get(str(kind)) or PROFILES["vllm"]


def _any_secret_flag(name: str) -> bool:
    from ..engine.registry import profiles
    return any(p.is_secret_flag(name) for p in profiles())


class SpecError(ServetuneError):
    """Problems found across fields, each with its key path; `load_study` adds file and line."""

    def __init__(self, problems: list[tuple[Loc, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{dotted(loc)}: {msg}" for loc, msg in problems))


def dotted(loc: Loc) -> str:
    """`("scenarios", 0, "input_len")` -> `scenarios[0].input_len`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _limit_problem(limit: float) -> str | None:
    """An SLO limit is a positive finite number (a latency ceiling or a throughput floor)."""
    if not math.isfinite(limit) or limit <= 0:
        return f"an SLO limit must be a positive number, got {limit:g}"
    return None


def env_text(value: object) -> str:
    """Environment values are strings; YAML booleans become 1/0, the convention of vLLM's VLLM_* switches."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _env_value(value: object) -> object:
    """A YAML number or boolean in `env` becomes its text (env_text); anything else is left for
    the string check to reject."""
    return env_text(value) if isinstance(value, (int, float)) else value


# An environment value as validated: always a string.
EnvValue = Annotated[str, BeforeValidator(_env_value)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineSpec(_Strict):
    kind: str = "vllm"  # a registered engine (engine/registry.py)
    command: list[str] = Field(min_length=1)  # default: the kind's (`_take_out_secrets` fills it in)
    model: str
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    # Secret variables of the server, by name: those `env` gives (taken out of it on load) and
    # those read from servetune's environment at launch. Only names are stored; see `secrets`.
    secret_env: list[EnvName] = Field(default_factory=list)
    startup_timeout_s: float = Field(default=3600, gt=0, allow_inf_nan=False)
    startup_stall_s: float = Field(default=600, gt=0, allow_inf_nan=False)
    port: int | None = Field(default=None, ge=1, le=65535)
    served_model_name: str | None = None
    # Where the servers keep their compile caches (vLLM's, torch inductor's, Triton's), a
    # directory per slot; unset: `cache/` in the study directory, so nothing an earlier job left
    # on the machine reaches a result (engine/cache.py). A relative path is taken from the
    # directory servetune runs in.
    cache_root: str | None = None
    # CPU build on a few cores: pin the busy-waiting EngineCore to the workers' cores so it does
    # not starve the API server (engine/cpu_layout.py says why); a no-op where nothing is reserved.
    pin_engine_core: bool = False
    # Knob (`env.NAME`) -> the boot-log line or /metrics family that shows it took effect, for a
    # knob no rule of servetune knows (engine/knobs.py).
    evidence: dict[str, DeclaredEvidence] = Field(default_factory=dict)
    # Secret values the study file gave literally: used at launch, never dumped (so never stored).
    _secret_values: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str, info: ValidationInfo) -> str:
        return registered(kind, info, ENGINE_KINDS, "engine kind")

    @model_validator(mode="wrap")
    @classmethod
    def _take_out_secrets(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> EngineSpec:
        """Secret entries of `env` and secret flags of `args` (`api-key` -> VLLM_API_KEY) leave the
        spec before validation: what remains (and every Config built from it) holds no secret value."""
        data, values = _split_secrets(data)
        if isinstance(data, dict) and "command" not in data:
            data = {**data, "command": list(_profile(data.get("kind", "vllm")).default_command)}
        spec = cast(EngineSpec, handler(data))  # the handler validates into this class
        if values:
            spec._secret_values = values
        return spec

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No `secret_env` (or `evidence`) key when there are none: a stored spec from before the key
        existed stays equal to its study's dump, so such studies still resume."""
        out: dict[str, Any] = handler(self)  # a model's wrapped serializer gives its dict
        if not self.secret_env:
            out.pop("secret_env", None)
        if not self.evidence:
            out.pop("evidence", None)
        return out

    @property
    def secrets(self) -> Secrets:
        return Secrets(names=tuple(dict.fromkeys(self.secret_env)), literal=dict(self._secret_values))

    @property
    def profile(self) -> EngineProfile:
        return _profile(self.kind)

    @field_validator("args")
    @classmethod
    def _normalize_args(cls, args: dict[str, FlagValue], info: ValidationInfo) -> dict[str, FlagValue]:
        out: dict[str, FlagValue] = {}
        reserved = _profile(info.data.get("kind", "vllm")).reserved_args
        for raw, value in args.items():
            name = normalize_flag_name(raw)
            if name in reserved:
                raise ValueError(f"set {reserved[name]} instead of args.{raw}")
            if name in out:
                raise ValueError(f"flag {name!r} is given twice (as {raw!r} and another spelling)")
            out[name] = value
        return out


def _split_secrets(data: Any) -> tuple[Any, dict[str, str]]:
    """(the engine section without secret values, name -> secret value). Entries that are not
    well-formed stay where they are, for validation to report them at their own line."""
    if not isinstance(data, dict):
        return data, {}
    named = data.get("secret_env", [])
    if not isinstance(named, list):
        return data, {}
    values: dict[str, str] = {}
    env = data.get("env")
    if isinstance(env, dict):
        for name, value in env.items():
            if not is_env_name(name) or not isinstance(value, (str, int, float)):
                continue
            # A boolean is a switch, not a credential, unless the study names it secret.
            if name in named or (is_secret_name(name) and not isinstance(value, bool)):
                values[name] = env_text(value)
        env = {k: v for k, v in env.items() if k not in values}
    args = data.get("args")
    profile = _profile(data.get("kind", "vllm"))
    if isinstance(args, dict):
        kept = {}
        for raw, value in args.items():
            flag = normalize_flag_name(str(raw))
            if flag in profile.argv_secret_flags and flag_value_secret(value) is not None:
                raise ValueError(f"args.{raw}: {profile.label} reads this secret from its command line only, where "
                                 f"every process sees it; a secret flag is not supported for {profile.kind}")
            var = profile.secret_flags.get(flag)
            secret = flag_value_secret(value) if var is not None else None
            if var is None or secret is None:
                kept[raw] = value
            elif values.get(var, secret) != secret:
                raise ValueError(f"args.{raw} and env.{var} give two different secrets; {profile.label} reads the "
                                 f"flag as {var}, so give it once")
            else:
                values[var] = secret
        args = kept
    new = [n for n in values if n not in named]
    out = {**data, "secret_env": [*named, *new]}
    if env is not None:
        out["env"] = env
    if args is not None:
        out["args"] = args
    return out, values


class Replicates(_Strict):
    """Runs per scenario on one server: fixed (`replicates: 3`) or adaptive between min and max,
    stopping early once the objective's CI half-width is within `target_rel_ci` of its mean."""

    min: int = Field(default=3, ge=1, le=MAX_REPLICATES)
    max: int = Field(default=3, ge=1, le=MAX_REPLICATES)
    target_rel_ci: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _from_int(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            return {"min": data, "max": data}
        if not isinstance(data, dict):
            raise ValueError("expected a number of replicates or {min, max, target_rel_ci}")
        return data

    @model_validator(mode="after")
    def _check(self) -> Replicates:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Parallel(_Strict):
    """Trials at once on this host (`parallel: {slots: N, gpus_per_trial: K}`). Slot i's server
    sees GPUs K*i .. K*i+K-1; with `gpus_per_trial: 0` (a CPU build) each slot gets its own share
    of the CPUs instead. One slot is a study run trial after trial."""

    slots: int = Field(default=1, ge=1, le=64)
    gpus_per_trial: int = Field(default=0, ge=0, le=64)


class Budget(_Strict):
    trials: int | None = Field(default=None, ge=1)
    wall_minutes: float | None = Field(default=None, gt=0)


class Stopping(_Strict):
    """A search that knows when to stop (search/stopping.py): it ends once no config it has not
    booted has a `chance_below` chance of beating the leader by `min_effect_pct`, by a
    main-effects posterior of the measured configs. Unset: the search runs until its strategy or
    budget ends it."""

    # At most 0.15: a value no trial has booted is given a chance of about 1 - Phi(1) = 0.16 of
    # beating a leader that owes its lead to that value's parameter, so a higher threshold could
    # end a search before it has booted a value that matters.
    chance_below: float | None = Field(
        default=None, gt=0, le=0.15, allow_inf_nan=False,
        description="end the search once no unbooted config has this chance of beating the leader by "
                    "min_effect_pct (e.g. 0.05; at most 0.15)")


Metric = Annotated[str, BeforeValidator(lambda v: check_metric(v) if isinstance(v, str) else v)]


class ObjectiveSpec(_Strict):
    maximize: Metric | None = None
    minimize: Metric | None = None
    combine: Literal["weighted", "worst_case"] = "weighted"
    weights: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(default_factory=dict)
    # {metric: limit} for every scenario, {scenario: {metric: limit}} for one, and within a mixed
    # scenario {scenario: {class: {metric: limit}}} for one of its traffic classes.
    slo: dict[str, float | dict[str, float | dict[str, float]]] = Field(default_factory=dict)
    # Each config's objective divided by the GPUs one server of it takes (tensor x pipeline x
    # data parallel sizes): what a second GPU buys, e.g. tensor parallel 2 against 1 per GPU.
    per_gpu: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_metric(cls, data: Any) -> Any:
        if isinstance(data, dict) and "maximize" not in data and "minimize" not in data:
            return {**data, "maximize": "output_throughput"}
        return data

    @model_validator(mode="after")
    def _check(self) -> ObjectiveSpec:
        if self.maximize is not None and self.minimize is not None:
            raise ValueError("give maximize or minimize, not both")
        if self.per_gpu and not (self.maximizing and higher_is_better(self.metric)):
            raise ValueError(f"per_gpu divides a throughput or a capacity by the GPUs that serve it; "
                             f"{'minimize' if self.minimize else 'maximize'}: {self.metric} has no share per GPU")
        return self

    @property
    def metric(self) -> str:
        return self.maximize or self.minimize  # type: ignore[return-value]

    @property
    def maximizing(self) -> bool:
        return self.maximize is not None

    def slo_for(self, scenario: str) -> dict[str, float]:
        """Study-wide limits overlaid with the scenario's own."""
        limits = {k: v for k, v in self.slo.items() if not isinstance(v, dict)}
        own = self.slo.get(scenario)
        if isinstance(own, dict):
            limits.update({k: v for k, v in own.items() if not isinstance(v, dict)})
        return limits

    def class_slo_for(self, scenario: str) -> dict[str, dict[str, float]]:
        """A mixed scenario's limits per traffic class, judged on that class's requests alone."""
        own = self.slo.get(scenario)
        if not isinstance(own, dict):
            return {}
        return {name: dict(limits) for name, limits in own.items() if isinstance(limits, dict)}


class CapacitySpec(_Strict):
    """How `maximize: capacity` searches each scenario's load level on one boot (capacity/search.py):
    an open loop's rate in req/s, or a closed loop's concurrency for a scenario without a rate."""

    start: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                description="first level (default: the scenario's own rate or concurrency)")
    max_level: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                    description="highest level (default 1000 req/s, 1024 users)")
    num_prompts: int = Field(default=400, ge=1,
                             description="requests per run of a level (a p99 needs 396 to be shown met)")
    rel_tol: float = Field(default=0.1, gt=0, lt=1, description="bisect until the bracket is this narrow")
    max_levels: int = Field(default=10, ge=1)
    max_runs_per_level: int = Field(default=2, ge=1, description="runs pooled at an undecided level")
    looks_per_run: int = Field(default=LOOKS_PER_RUN, ge=1,
                               description="looks at a level's verdict per run, its end included (1: at the end only)")

    def looks(self, alpha: float) -> Looks:
        return Looks(alpha, self.looks_per_run, self.max_runs_per_level)

    @model_validator(mode="after")
    def _check(self) -> CapacitySpec:
        if self.start is not None and self.max_level is not None and self.start > self.max_level:
            raise ValueError(f"start ({self.start:g}) is above max_level ({self.max_level:g})")
        return self


def _expand_preset(data: Any) -> Any:
    """`{preset: NAME, **overrides}` -> the preset's fields with the overrides laid over."""
    if not isinstance(data, dict) or "preset" not in data:
        return data
    fields = dict(data)
    name = fields.pop("preset")
    if not isinstance(name, str) or name not in PRESETS:
        # Pydantic fills `{key}` from a context; the message is complete already, so none is given.
        message = f"unknown scenario preset {name!r}{did_you_mean(name, PRESETS)}; known: {', '.join(PRESETS)}"
        raise PydanticCustomError("unknown_preset", message)
    return {**PRESETS[name].model_dump(), "name": name, **fields}


ScenarioEntry = Annotated[Scenario, BeforeValidator(_expand_preset)]


def _check_param_name(raw: str) -> str:
    """A space key names a flag or a valid variable, and never a secret (a key is not a knob)."""
    name = normalize_param_name(raw)
    var = env_var(name)
    if var:
        check_env_name(var)
    if _any_secret_flag(name) or (var and is_secret_name(var)):
        raise ValueError(f"{raw!r} is a secret and cannot be tuned")
    return raw


ParamName = Annotated[str, AfterValidator(_check_param_name)]


class Revalidation(_Strict):
    """Re-validation until decided: while the leading finalist is neither proven better nor ruled
    out, it and the baseline are booted again, a pair at a time, up to `max_boots` boots of the
    finalist in all (its screening boot included). Every look is counted in the false-winner rate
    (stats/pipeline.py), so the cap is fixed when the study starts. 2: no boot beyond the first
    re-validation."""

    max_boots: int = Field(default=5, ge=2, le=20,
                           description="most boots the leading finalist gets (screening boot included)")


class Racing(_Strict):
    """Racing inside a trial: after each replicate a screening candidate whose objective interval
    lies wholly below the baseline's by more than `min_effect_pct` stops measuring ("stopped
    early: clearly worse"; tune/racing.py). It is never a finalist; its runs stay in the report.
    The interval is the study's screening interval at `confidence`, boot-to-boot variance
    included, so it waits until some config has been booted twice."""

    enabled: bool = Field(default=True, description="stop a clearly worse candidate after any replicate")
    confidence: float = Field(default=0.99, gt=0.5, lt=1, allow_inf_nan=False,
                              description="two-sided level of the interval that must lie below the baseline")


class Screening(_Strict):
    """Cheap screening, full finalists: the search's boots (candidates and the baseline's) run
    each scenario with `num_prompts_fraction` of its prompts (and of its duration_s); finalists
    and their baselines run them in full. Each length has its own baseline reference, so a
    shorter run's bias cancels in every ratio."""

    num_prompts_fraction: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False,
                                        description="share of each scenario's prompts a screening run sends")


_PROFILE_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*$")


def _check_profile_name(name: str) -> str:
    """A profile's name is a folder of the report (profiles/NAME/): no separator, no leading dot."""
    if not _PROFILE_NAME.match(name):
        raise ValueError(f"profile name {name!r} names a folder of the report: use letters, digits, "
                         "'_', '.' and '-', starting with a letter or digit")
    return name


ProfileName = Annotated[str, AfterValidator(_check_profile_name)]


class StudySpec(_Strict):
    name: str = Field(min_length=1, pattern=r"^[\w.\-]+$")
    engine: EngineSpec
    # Further engine sections, by kind, for a study that compares engines (`engine.kind: [vllm,
    # sglang]` in its space): each config runs on its kind's section, measured on the same
    # scenarios and judged by the same statistics as any other. `model` defaults to `engine.model`.
    engines: dict[str, EngineSpec] = Field(default_factory=dict)
    space: dict[ParamName, Parameter] = Field(default_factory=dict)
    constraints: list[Constraint] = Field(default_factory=list)
    scenarios: list[ScenarioEntry] = Field(min_length=1)
    objective: ObjectiveSpec = Field(default_factory=lambda: ObjectiveSpec(maximize="output_throughput"))
    strategy: str = "ofat"  # a registered strategy (search/registry.py)
    replicates: Replicates = Field(default_factory=Replicates)
    budget: Budget = Field(default_factory=Budget)
    stopping: Stopping = Field(default_factory=Stopping,
                               description="end the search once no unbooted config is likely to beat the leader")
    parallel: Parallel = Field(default_factory=Parallel)
    finalists: int = Field(default=2, ge=0)
    revalidation: Revalidation = Field(
        default_factory=Revalidation,
        description="re-validation until decided: the leading finalist and the baseline booted again while undecided")
    racing: Racing = Field(default_factory=Racing,
                           description="racing inside a trial: a clearly worse candidate stops measuring")
    screening: Screening = Field(default_factory=Screening,
                                 description="cheap screening: search boots run a share of each scenario's prompts")
    baseline_every: int = Field(default=3, ge=1, description="re-measure the baseline every N candidate trials")
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_effect_pct: float = Field(default=1.0, ge=0, allow_inf_nan=False,
                                  description="smaller significant gains count as no difference")
    seed: int = 0
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    # What one GPU costs an hour: the report then gives the cost per million output tokens at capacity.
    price_per_gpu_hour: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    # The device's memory bandwidth, measured once at the study's start for the report's decode roofline.
    measure_bandwidth: bool = True
    prefer_less_memory: bool = Field(
        default=False,
        description="a GPU shared with other work: among re-validated winners whose objectives the study cannot "
                    "tell apart, the one that reserves the least memory (--gpu-memory-utilization, then "
                    "--kv-cache-memory-bytes) wins")
    profiles: dict[ProfileName, ObjectiveSpec] = Field(
        default_factory=dict,
        description="named deployment profiles (latency, throughput, ...), each an objective with its own SLOs "
                    "(the keys of `objective`): the report names the best config for each from the same runs, "
                    "under the same verdict rule, and emits it (analysis/profiles.py)")

    @field_validator("engines", mode="before")
    @classmethod
    def _kind_from_key(cls, engines: Any, info: ValidationInfo) -> Any:
        """An `engines` section's kind is its key, its model the study's unless it names one."""
        if not isinstance(engines, dict):
            return engines
        engine = info.data.get("engine")
        out = {}
        for key, section in engines.items():
            if isinstance(section, dict):
                section = {"kind": key, **section}
                if engine is not None and "model" not in section:
                    section["model"] = engine.model
            out[key] = section
        return out

    @field_validator("constraints")
    @classmethod
    def _quote_string_values(cls, constraints: list[Constraint], info: ValidationInfo) -> list[Constraint]:
        """`kv-cache-dtype != fp8_e5m2`: a bare value that names nothing is the string it spells."""
        engine = info.data.get("engine")
        known = {*info.data.get("space", {}), *(engine.args if engine else {}),
                 *(f"{ENV_PREFIX}{k}" for k in (engine.env if engine else {}))}
        return [c.with_literals(known) for c in constraints]

    @field_validator("strategy")
    @classmethod
    def _registered_strategy(cls, name: str, info: ValidationInfo) -> str:
        return registered(name, info, STRATEGY_NAMES, "strategy")

    @field_validator("space")
    @classmethod
    def _normalize_space(cls, space: dict[str, Parameter], info: ValidationInfo) -> dict[str, Parameter]:
        out: dict[str, Parameter] = {}
        engine = info.data.get("engine")
        reserved = (engine.profile if engine else _profile("vllm")).reserved_args
        for raw, param in space.items():
            name = normalize_param_name(raw)
            if name == ENV_PREFIX:
                raise ValueError("'env.' needs a variable name after it")
            if name in reserved:
                raise ValueError(f"{raw!r} cannot be tuned here (it is {reserved[name]})")
            if name in out:
                raise ValueError(f"parameter {name!r} is given twice (as {raw!r} and another spelling)")
            out[name] = param
        return out

    @classmethod
    def from_store(cls, raw: Any) -> StudySpec:
        """The spec a store holds, for reading what was measured: checks that only guard new
        measurements (enough requests a capacity level) are left out, so a store made before
        such a check was added still reports."""
        return cls.model_validate(raw, context={STORED: True})

    @model_validator(mode="after")
    def _cross_check(self, info: ValidationInfo) -> StudySpec:
        problems = (self._scenario_problems() + self._objective_problems() + self._constraint_problems()
                    + self._secret_problems() + self._json_field_problems() + self._evidence_problems()
                    + self._engine_problems())
        if not (info.context or {}).get(STORED):
            problems += self._trace_problems() or self._capacity_sample_problems()
        if problems:
            raise SpecError(problems)
        return self

    def _scenario_problems(self) -> list[tuple[Loc, str]]:
        problems: list[tuple[Loc, str]] = []
        first: dict[str, int] = {}
        for i, scenario in enumerate(self.scenarios):
            if scenario.name in first:
                problems.append(
                    (("scenarios", i, "name"), f"scenario name {scenario.name!r} is used twice "
                                               f"(also scenarios[{first[scenario.name]}]); give each a unique name")
                )
            first.setdefault(scenario.name, i)
        return problems

    def _objective_problems(self) -> list[tuple[Loc, str]]:
        problems = self._capacity_problems() + self._goodput_problems(self.objective, ("objective",))
        problems += self._weight_and_slo_problems(self.objective, ("objective",))
        for name, profile in self.profiles.items():
            problems += self._profile_problems(name, profile)
        return problems

    def _weight_and_slo_problems(self, objective: ObjectiveSpec, at: Loc) -> list[tuple[Loc, str]]:
        """Weights and SLOs name the study's scenarios and known metrics, with positive limits."""
        names = self.scenario_names
        problems: list[tuple[Loc, str]] = []
        for key in objective.weights:
            if key not in names:
                problems.append(((*at, "weights", key), f"no scenario named {key!r}{did_you_mean(key, names)}"))
        if objective.weights and sum(objective.weights.get(n, 1.0) for n in names) <= 0:
            problems.append(((*at, "weights"), "at least one scenario needs a positive weight"))
        for key, value in objective.slo.items():
            if isinstance(value, dict):
                if key not in names:
                    problems.append(((*at, "slo", key), f"no scenario named {key!r}{did_you_mean(key, names)}"))
                    continue
                plain = {m: v for m, v in value.items() if not isinstance(v, dict)}
                problems += [((*at, "slo", key, m), msg) for m in plain if (msg := metric_problem(m))]
                problems += [((*at, "slo", key, m), msg) for m, v in plain.items()
                             if (msg := _limit_problem(v))]
                problems += self._class_slo_problems(key, objective, at)
            elif msg := metric_problem(key, also=names) or _limit_problem(value):
                problems.append(((*at, "slo", key), msg))
        return problems

    def _profile_problems(self, name: str, profile: ObjectiveSpec) -> list[tuple[Loc, str]]:
        """A profile judges the study's runs again under its own objective and SLOs: it cannot ask
        for what those runs did not measure (a capacity, goodput against other limits)."""
        at: Loc = ("profiles", name)
        if self.objective.metric == CAPACITY:
            return [(at, "a maximize: capacity study measures each config's load levels against the objective's "
                         "SLOs only; profiles need a study measured at fixed load (another objective)")]
        if profile.metric == CAPACITY:
            key = "maximize" if profile.maximize else "minimize"
            return [((*at, key), "capacity is measured by a maximize: capacity study, not chosen per profile")]
        problems = self._goodput_problems(profile, at) + self._weight_and_slo_problems(profile, at)
        if profile.metric == GOODPUT and not problems:
            problems += [((*at, "slo"), f"request_goodput was counted against the objective's per-request SLOs; "
                          f"scenario {s!r} needs the same limits on ttft, tpot and e2el here, or another metric")
                         for s in self.scenario_names if profile.weights.get(s, 1.0) > 0
                         and _per_request(profile, s) != _per_request(self.objective, s)]
        return problems

    def _class_slo_problems(self, scenario: str, objective: ObjectiveSpec, at: Loc) -> list[tuple[Loc, str]]:
        """A scenario's class entries (in `objective`, the study's or a profile's, at `at`) name its
        classes (or its trace's request types), and bound latencies each request has."""
        try:
            classes = class_names(next(s for s in self.scenarios if s.name == scenario))
        except ServetuneError:   # an unreadable trace: its own problem, reported with the scenario
            classes = list(objective.class_slo_for(scenario))
        problems: list[tuple[Loc, str]] = []
        if objective.metric == CAPACITY and objective.class_slo_for(scenario):
            return [((*at, "slo", scenario), "a traffic class's SLOs are judged on a study's runs; "
                                             "maximize: capacity judges each load level by the scenario's")]
        for name, limits in objective.class_slo_for(scenario).items():
            loc: Loc = (*at, "slo", scenario, name)
            if name not in classes:
                known = f"its classes: {', '.join(classes)}" if classes else "it has no classes"
                problems.append((loc, f"scenario {scenario!r} has no traffic class {name!r}"
                                      f"{did_you_mean(name, classes)} ({known})"))
                continue
            for metric, limit in limits.items():
                if class_slo(metric, 1.0) is None:
                    problems.append(((*loc, metric), f"a class's SLO bounds a latency of its requests "
                                                     f"(mean, median or pNN of ttft, tpot, itl, e2el in ms, e.g. "
                                                     f"p99_ttft_ms), not {metric!r}"))
                elif msg := _limit_problem(limit):
                    problems.append(((*loc, metric), msg))
        return problems

    def _capacity_problems(self) -> list[tuple[Loc, str]]:
        """`capacity` is only maximised, and every scored scenario needs an SLO a search can judge."""
        if self.objective.minimize == CAPACITY:
            return [(("objective", "minimize"), "capacity can only be maximised")]
        if self.objective.maximize != CAPACITY:
            return []
        problems: list[tuple[Loc, str]] = []
        if self.screening.num_prompts_fraction < 1.0:
            problems.append((("screening", "num_prompts_fraction"),
                             "a capacity search sends capacity.num_prompts at each level: screening is not shortened"))
        bad: set[str] = set()
        for i, scenario in enumerate(self.scenarios):
            limits = self.objective.slo_for(scenario.name)
            bad |= {k for k in limits if slo_from_key(k, limits[k]) is None}
            if not limits and self.objective.weights.get(scenario.name, 1.0) > 0:
                problems.append((("objective", "slo"), f"maximize: capacity needs an SLO for scenario "
                                 f"{scenario.name!r}, e.g. p99_ttft_ms: 1000"))
            if scenario.sweep_input_lens or scenario.duration_s is not None:
                problems.append((("scenarios", i),
                                 "a capacity search sends num_prompts at each level: no sweep or duration_s"))
        problems += [(("objective", "slo", k), f"{k} cannot bound a capacity: give a latency as "
                      "mean_ or pNN_, then ttft, tpot, itl or e2el, then _ms") for k in sorted(bad)]
        return problems

    def _goodput_problems(self, objective: ObjectiveSpec, at: Loc) -> list[tuple[Loc, str]]:
        """Goodput counts the requests that meet a scenario's per-request SLOs: a scored scenario
        without an SLO on TTFT, TPOT or E2EL would have none to count by."""
        if objective.metric != GOODPUT:
            return []
        return [((*at, "slo"), f"{objective.metric} counts the requests that meet every per-request "
                 f"SLO: give scenario {scenario.name!r} a limit on ttft, tpot or e2el (e.g. p99_ttft_ms: 1000)")
                for scenario in self.scenarios
                if objective.weights.get(scenario.name, 1.0) > 0 and not _per_request(objective, scenario.name)]

    def _trace_problems(self) -> list[tuple[Loc, str]]:
        """A trace that cannot be read, found now rather than by every trial's runs."""
        for i, scenario in enumerate(self.scenarios):
            if scenario.trace is not None:
                try:
                    load_replay(scenario.trace)
                except ServetuneError as exc:
                    return [(("scenarios", i, "trace", "path"), str(exc))]
        return []

    def _capacity_sample_problems(self) -> list[tuple[Loc, str]]:
        """A level of too few requests can never show a percentile SLO met: every search would end
        with an interval from 0 and measure each level max_runs_per_level times for nothing."""
        needs: dict[str, int] = {}
        for i, scenario in enumerate(self.scenarios):
            limits = self.objective.slo_for(scenario.name)
            for key, limit in limits.items():
                slo = slo_from_key(key, limit)
                n = None if slo is None else requests_to_meet(slo, self.capacity.looks(self.alpha).planned_alpha)
                if scenario.trace is not None:  # a level replays the trace's window, whatever num_prompts says
                    sent = len(load_replay(scenario.trace).requests)
                    if self.objective.maximize == CAPACITY and n is not None and n > sent:
                        return [(("scenarios", i, "trace"), f"the trace's {sent} requests cannot show {key} met "
                                 f"at alpha {self.alpha:g}: a level needs at least {n} (a longer window)")]
                elif n is not None and n > self.capacity.num_prompts:
                    needs[key] = max(n, needs.get(key, 0))
        if not needs:
            return []
        key, n = max(needs.items(), key=lambda kv: kv[1])
        return [(("capacity", "num_prompts"),
                 f"{self.capacity.num_prompts} requests a level cannot show {key} met at alpha {self.alpha:g}: "
                 f"a level needs at least {n} (or judge a lower percentile)")]

    def _constraint_problems(self) -> list[tuple[Loc, str]]:
        known = [*self.space, *self.engine.args, *(f"{ENV_PREFIX}{k}" for k in self.engine.env)]
        problems: list[tuple[Loc, str]] = []
        for i, c in enumerate(self.constraints):
            for name in c.names():
                if name not in known:
                    hint = did_you_mean(name, known)
                    problems.append((("constraints", i),
                                     f"{name!r} is neither a space parameter nor an engine arg{hint}"))
            p = c.parsed
            for operand, other in ((p.left, p.right), (p.right, p.left)):
                # An unset baseline is the engine's default, which a constraint never compares (None).
                values = [v for v in self._possible_values(operand.name) if v is not None] \
                    if operand.name in self.space else []
                if other.text is not None and values and other.text not in values:
                    problems.append((("constraints", i), f"{c.expr!r}: {other.text!r} is none of {operand.name!r}'s "
                                                         f"values ({', '.join(map(repr, values))})"))
            if p.op in ORDER_OPS:
                for operand in (p.left, p.right):
                    bad = ([v for v in self._possible_values(operand.name) if v is not None and not is_number(v)]
                           if operand.name else [])
                    if bad:
                        problems.append((("constraints", i), f"{c.expr!r} orders {operand.name!r}, which can be the "
                                                             f"non-number {bad[0]!r}"))
        return problems

    def _secret_problems(self) -> list[tuple[Loc, str]]:
        """Variables the study names secret (engine.secret_env) are not knobs either."""
        named = set(self.engine.secret_env)
        return [(("space", name), f"{name!r} is a secret (engine.secret_env) and cannot be tuned")
                for name in self.space if (var := env_var(name)) is not None and var in named]

    def _evidence_problems(self) -> list[tuple[Loc, str]]:
        """Evidence is declared for a knob (`env.NAME`) the study sets (engine.env or the space)."""
        knobs = [*(f"{ENV_PREFIX}{k}" for k in self.engine.env), *(n for n in self.space if env_var(n) is not None)]
        problems: list[tuple[Loc, str]] = []
        for name in self.engine.evidence:
            if not is_env_name(env_var(name)):
                problems.append((("engine", "evidence", name), f"{name!r} is not a knob: name a variable as env.NAME"))
            elif name not in knobs:
                problems.append((("engine", "evidence", name), f"{name!r} is set neither in engine.env nor in the "
                                 f"space{did_you_mean(name, knobs)}"))
        return problems

    def _json_field_problems(self) -> list[tuple[Loc, str]]:
        """A swept field (`speculative-config.num_speculative_tokens`) lives in a mapping the
        baseline gives (`engine.args.speculative-config: {method: ngram, ...}`), and the whole flag
        is not swept beside it (the two would overwrite each other)."""
        args = {normalize_param_name(k): v for k, v in self.engine.args.items()}
        problems: list[tuple[Loc, str]] = []
        for name in self.space:
            field = json_field(name)
            if field is None:
                continue
            flag, key = field
            if not key:
                problems.append((("space", name), f"{name!r} needs a field name after the '.'"))
            elif not isinstance(args.get(flag), dict):
                problems.append((("space", name), f"{name!r} sets field {key!r} of {flag!r}, so engine.args.{flag} "
                                 f"must be a mapping (e.g. {{method: ngram}}) that the field is laid into"))
            elif flag in self.space:
                problems.append((("space", name), f"{name!r} and {flag!r} are both swept; sweep one of them"))
        return problems

    def _possible_values(self, name: str) -> list[Any]:
        values = [config_value(self.baseline_config(), name)]
        param = self.space.get(name)
        if param is not None and param.values is not None:
            values += list(param.values)
        return values

    def _engine_problems(self) -> list[tuple[Loc, str]]:
        """Features the study's engine lacks, and an engine comparison that cannot run as meant."""
        problems: list[tuple[Loc, str]] = []
        profile = self.engine.profile
        for section in [self.engine, *self.engines.values()]:
            if section.pin_engine_core and not section.profile.supports(Capability.engine_core_pinning):
                where: Loc = ("engine",) if section is self.engine else ("engines", section.kind)
                problems.append(((*where, "pin_engine_core"), f"{Capability.engine_core_pinning.value} is not "
                                                              f"supported for {section.kind}"))
        for key in self.space:
            if key.split(".")[0] == "speculative-config" and not profile.supports(Capability.speculative_sweep):
                problems.append((("space", key), f"{Capability.speculative_sweep.value} is not supported for "
                                                 f"{profile.kind}"))
        for key, section in self.engines.items():
            if section.kind != key:
                problems.append((("engines", key, "kind"), f"the section of kind {key!r} says kind "
                                                           f"{section.kind!r}; give one kind"))
        kinds = self.engine_kinds
        param = self.space.get(ENGINE_KIND_PARAM)
        if param is None:
            if self.engines:
                problems.append((("engines",), f"no space key {ENGINE_KIND_PARAM!r} chooses among the engines; "
                                               f"add `{ENGINE_KIND_PARAM}: [{', '.join(kinds)}]` to the space"))
            return problems
        values = list(param.values or [])
        for value in values:
            if value not in kinds:
                problems.append((("space", ENGINE_KIND_PARAM), f"{value!r} has no engine section; the study's "
                                                               f"engines: {', '.join(kinds)}"))
        missing = [k for k in self.engines if k not in values]
        if missing:
            problems.append((("space", ENGINE_KIND_PARAM), f"the engine section(s) {', '.join(missing)} are "
                                                           "never booted; list them among the values"))
        others = [k for k in self.space if k != ENGINE_KIND_PARAM]
        if others:
            problems.append((("space", others[0]), f"with {ENGINE_KIND_PARAM} in the space, each engine's flags go "
                                                   "in its own section's args: a space key would reach both "
                                                   "engines, whose flags differ"))
        return problems

    # --- what the runner and the strategies call -------------------------------------------

    @property
    def engine_kinds(self) -> list[str]:
        """The study's engine first, then its further sections'."""
        return list(dict.fromkeys([self.engine.kind, *self.engines]))

    def engine_section(self, kind: str | None) -> EngineSpec:
        """The engine section a config of `kind` runs on (None: the study's engine)."""
        if kind is None or kind == self.engine.kind:
            return self.engine
        section = self.engines.get(kind)
        if section is None:
            raise ServetuneError(f"{ENGINE_KIND_PARAM} {kind!r}: study {self.name!r} has no such engine section")
        return section

    @property
    def scenario_names(self) -> list[str]:
        return [s.name for s in self.scenarios]

    def baseline_config(self) -> Config:
        """The engine args and env exactly as the study gives them."""
        return Config.of(flags=self.engine.args, env=self.engine.env)

    def config_for(self, params: dict[str, Any]) -> Config:
        """The baseline with parameter values laid over; `env.X` sets env X; None drops a flag or variable."""
        kind = params.get(ENGINE_KIND_PARAM)
        section = self.engine_section(str(kind) if kind is not None else None)
        base = Config.of(flags=section.args, env=section.env)
        flags, env = dict(base.flags), dict(base.env)
        for raw, value in params.items():
            name = normalize_param_name(raw)
            if name == ENGINE_KIND_PARAM:
                continue
            if name not in self.space:
                raise ServetuneError(f"{name!r} is not a parameter of study {self.name!r}"
                                     f"{did_you_mean(name, self.space)}")
            var = env_var(name)
            field = json_field(name)
            if field is not None:
                flags[field[0]] = _with_field(flags.get(field[0]), field[1], value)
                continue
            target: dict[str, Any] = env if var is not None else flags
            key = var if var is not None else name
            if value is None:
                target.pop(key, None)
            else:
                target[key] = env_text(value) if var is not None else value
        return Config(flags=flags, env=env, engine=section.kind if section is not self.engine else None)

    def constraint_violations(self, config: Config) -> list[str]:
        return violations(self.constraints, config)



def _per_request(objective: ObjectiveSpec, scenario: str) -> dict[str, float]:
    """The limits each request of `scenario` is held to for goodput under `objective`."""
    return per_request_limits(slos_from_limits(objective.slo_for(scenario)))


def _with_field(mapping: Any, key: str, value: Any) -> dict[str, Any]:
    """A JSON flag's mapping with one field set (None: the field left out), the rest kept."""
    out = {k: v for k, v in (mapping if isinstance(mapping, dict) else {}).items() if k != key}
    if value is not None:
        out[key] = value
    return out
