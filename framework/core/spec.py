"""The hypothesis DSL: pydantic models of hypotheses and experiments, and their YAML loaders.

Everything a run depends on is checked here, before any server starts. Every problem is
reported as a :class:`SpecError` that names the file, the field and what is allowed, so the
CLI can print one line and exit 2. This module does no I/O beyond reading the YAML text it is
given a path to; the cross-checks are pure functions of the parsed models.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from framework.core import yamlio
from framework.core.bisect import BisectBlock
from framework.core.metrics import LAUNCH_METRICS, REQUEST_METRICS, SLO_KEYS, check_metric, needs_slo
from framework.core.search import SearchBlock
from framework.core.vocabulary import AnalysisMethod, FailureClass
from framework.core.workload import Workload
from framework.errors import SpecError

Estimand = Literal["mean", "typical"]
METRICS: dict[str, str] = {**REQUEST_METRICS, **LAUNCH_METRICS}  # plus <metric>.<stat>: framework.core.metrics


def _arg_text(value: Any) -> Any:
    """A number in a command line is its text: YAML and Hydra read `[--chunked-prefill-size, 8192]` as an int."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


Arg = Annotated[str, BeforeValidator(_arg_text)]  # one argument of a server's command line


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- experiments


class SimSettings(_Strict):
    """How the embedded simulator stands in for this experiment's hardware."""

    profile: str = "rtx_pro_6000_tp8"


class Experiment(_Strict):
    """A server set-up: whose flags, model, tensor parallelism, base flags, workload, simulator profile."""

    name: str
    description: str = ""
    # Whose flag names server_args use: sglang (also the sim's), vllm, llamacpp, llama_server or gpu (the
    # project's GPU server: SGLang's names plus its own). A run on a backend with other flag names is refused
    # before anything starts.
    flags: Literal["sglang", "vllm", "llamacpp", "llama_server", "gpu"] = "sglang"
    model_path: str
    tp_size: int = Field(1, ge=1, le=1024)
    server_args: list[Arg] = []
    workload: Workload = Workload()
    sim: SimSettings = SimSettings()


# --------------------------------------------------------------------------- hypotheses


class Level(_Strict):
    """What one level of a factor changes: server flags, workload settings, or the backend's environment."""

    server_args: list[Arg] = []
    workload: dict[str, Any] = {}
    env: dict[str, str] = {}
    sim_profile: str | None = None
    python: str | None = None

    @field_validator("workload")
    @classmethod
    def _known_workload_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(Workload.model_fields))
        if unknown:
            raise ValueError(f"unknown workload field(s) {unknown}; allowed: {sorted(Workload.model_fields)}")
        for key, item in value.items():  # each value as it would stand in a workload (the merge is checked at run)
            try:
                Workload.model_validate({key: item})
            except ValidationError as exc:
                for err in exc.errors():
                    if err["loc"]:  # a field's own error (cross-field rules wait for the merged workload)
                        raise ValueError(f"workload.{key}: {err['msg'].removeprefix('Value error, ')}") from None
        return value


class Factor(_Strict):
    reference: str
    levels: dict[str, Level]

    @model_validator(mode="after")
    def _reference_is_a_level(self) -> "Factor":
        if len(self.levels) < 1:
            raise ValueError("a factor needs at least one level")
        if self.reference not in self.levels:
            raise ValueError(f"reference {self.reference!r} is not a level; levels: {sorted(self.levels)}")
        return self


class _Comparison(_Strict):
    """A comparison of one factor's level against its reference, with other factors pinned by `where`."""

    id: str
    factor: str
    level: str
    where: dict[str, str] = {}
    note: str = ""
    # what the comparison is about (docs/statistics.md, "Estimands"): `mean`, the ratio of geometric means over
    # launches (sensitive to a rare launch mode); `typical`, the typical launch's ratio (the Hodges-Lehmann shift
    # of log launch values, with the Moses interval and the Mann-Whitney test: a rare mode barely moves it)
    estimand: Estimand = "mean"


class Equivalent(_Comparison):
    """The level's effect is within +/- margin of no effect: ratio in [1 - margin, 1 + margin]."""

    kind: Literal["equivalent"]
    margin: float = Field(gt=0, lt=1)


class Increase(_Comparison):
    """The level raises the metric by at least min_effect: ratio > 1 + min_effect."""

    kind: Literal["increase"]
    min_effect: float = Field(0.0, ge=0)


class Decrease(_Comparison):
    """The level lowers the metric by at least min_effect: ratio < 1 - min_effect."""

    kind: Literal["decrease"]
    min_effect: float = Field(0.0, ge=0, lt=1)


class Interaction(_Strict):
    """The factor's effect is larger (or smaller) under `by=by_level` than under `by=by_reference`.

    The estimate is the ratio of ratios: (level/ref | by_level) / (level/ref | by_reference).
    """

    id: str
    kind: Literal["interaction"]
    factor: str
    level: str
    by: str
    by_level: str
    by_reference: str | None = None
    direction: Literal["larger", "smaller"] = "larger"
    min_effect: float = Field(0.0, ge=0, lt=1)
    where: dict[str, str] = {}
    note: str = ""


class Launches(_Strict):
    """A configuration starts and serves, or fails with a message matching `match` and/or a failure class.

    `failure_class` is one of framework.core.vocabulary.FAILURE_CLASSES (bad_flag, model_not_found,
    port_in_use, out_of_memory, cuda_mismatch, ...), as classified from the exit code and the log.
    `rate` is the reliability the prediction claims: P(a launch has the expected outcome) > rate.
    Only `design.analysis: anytime` tests it (docs/statistics.md, section 10); the other analyses
    count (supported iff every launch has the expected outcome).
    """

    id: str
    kind: Literal["launches"]
    where: dict[str, str]
    expect: Literal["starts", "fails"]
    match: str | None = None
    failure_class: FailureClass | None = None
    rate: float = 0.5  # "more often than not"
    note: str = ""

    @field_validator("rate")
    @classmethod
    def _rate_is_a_probability(cls, value: float) -> float:
        if not 0.0 < value < 1.0:
            raise ValueError(f"rate is the claimed probability that a launch has the expected outcome, strictly "
                             f"between 0 and 1 (e.g. 0.5: more often than not, 0.9: nine launches in ten); got {value}")
        return value

    @model_validator(mode="after")
    def _class_only_for_failures(self) -> "Launches":
        if self.failure_class is not None and self.expect != "fails":
            raise ValueError("failure_class applies to expect: fails")
        return self

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class Outputs(_Strict):
    """The level generates what the reference generates for the same prompts (rules version 5).

    Requests are paired by prompt within a block (framework.analysis.outputs); `min_agreement` is the registered
    bound on the share of paired requests whose generated tokens are identical: 1.0 (the default) claims that
    every one is. Both conditions must send the same prompts (`workload.prompt_seed`; framework.core.outputs).
    """

    id: str
    kind: Literal["outputs"]
    factor: str
    level: str
    where: dict[str, str] = {}
    min_agreement: float = 1.0
    note: str = ""

    @field_validator("min_agreement")
    @classmethod
    def _share(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"min_agreement is the share of paired requests whose outputs are identical, in (0, 1] "
                             f"(1.0: every one); got {value}")
        return value


Prediction = Annotated[Union[Equivalent, Increase, Decrease, Interaction, Launches, Outputs],
                       Field(discriminator="kind")]
PREDICTION_KINDS = ("equivalent", "increase", "decrease", "interaction", "launches", "outputs")


class Sequential(_Strict):
    """Sequential stopping: add launches in blocks and stop once every prediction is decided.

    `max_launches` left out: the design's `launches` times the group-sequential inflation factor,
    rounded up to whole blocks (framework.stats.sequential.sequential_cap), so the sequential run
    keeps the power the fixed design was planned for; under `analysis: anytime`, the cap at which
    the anytime rule has that power (framework.analysis.planning.anytime_cap).
    """

    enabled: bool = False
    block: int = Field(2, ge=1, le=100)
    max_launches: int | None = Field(None, ge=2, le=1000)


class Design(_Strict):
    """How the hypothesis is measured. The launch is the unit of replication."""

    launches: int = Field(5, ge=1, le=1000)
    requests: int = Field(3, ge=1, le=100_000)
    warmup: int = Field(1, ge=0, le=10_000)
    seed: int = Field(0, ge=0, lt=2**32)
    order: Literal["randomized_blocks", "sequential"] = "randomized_blocks"
    alpha: float = Field(0.05, gt=0, lt=0.5)
    # anytime: anytime-valid e-processes on block contrasts, and for launch outcomes on their claimed
    # `rate` (look after any block, stop or extend at will; docs/statistics.md section 10)
    analysis: AnalysisMethod = "welch"
    sequential: Sequential = Sequential()
    # the machines the launches are spread over (a blocking factor: block b on machine slot b mod machines,
    # framework.core.design.machine_slot); a verdict covers the machines its launches ran on (docs/statistics.md)
    machines: int = Field(1, ge=1, le=1000)

    @field_validator("sequential", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """`sequential: true` is `sequential: {enabled: true}`, as `design.sequential=true` on the command line."""
        return {"enabled": value} if isinstance(value, bool) else value


class Hypothesis(_Strict):
    name: str
    statement: str
    rationale: str = ""
    experiment: str
    metric: str = "decode_tok_s"
    slo: dict[Literal[SLO_KEYS], float] = {}  # type: ignore[valid-type]  # bounds in seconds, for goodput
    server_args: list[Arg] = []
    # a search (python -m framework search): its space stands for the factors and its confirmation for the
    # predictions, so a file with a search block may leave both out (declared before factors: their checks read it)
    search: SearchBlock | None = None
    # a bisection (python -m framework bisect): its versions stand for the factors and its ends' comparison for
    # the predictions, so a file with a bisect block may leave both out (framework.core.bisect)
    bisect: BisectBlock | None = None
    factors: dict[str, Factor] = Field(default_factory=dict, validate_default=True)
    predictions: list[Prediction] = Field(default_factory=list, validate_default=True)
    design: Design = Design()

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        problem = check_metric(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("slo")
    @classmethod
    def _positive_bounds(cls, value: dict[str, float]) -> dict[str, float]:
        for key, bound in value.items():
            if not bound > 0:
                raise ValueError(f"slo.{key} must be a positive number of seconds (got {bound!r})")
        return value

    @model_validator(mode="after")
    def _slo_when_needed(self) -> "Hypothesis":
        if needs_slo(self.metric) and not self.slo:
            raise ValueError(f"metric {self.metric} counts requests meeting SLOs: give slo, e.g. "
                             "slo: {ttft_s: 0.5, tpot_s: 0.05}")
        return self

    @field_validator("factors")
    @classmethod
    def _at_least_one(cls, value: dict[str, Factor], info: ValidationInfo) -> dict[str, Factor]:
        if not value and info.data.get("search") is None and info.data.get("bisect") is None:
            raise ValueError("at least one factor is needed")
        return value

    @field_validator("predictions")
    @classmethod
    def _some_predictions(cls, value: list[Any], info: ValidationInfo) -> list[Any]:
        if not value and info.data.get("search") is None and info.data.get("bisect") is None:
            raise ValueError("at least one prediction is needed")
        return value


# --------------------------------------------------------------------------- cross-checks


def check_hypothesis(h: Hypothesis) -> list[tuple[str, str]]:
    """Consistency checks pydantic cannot express field by field. Returns (field, message) pairs."""
    problems: list[tuple[str, str]] = []
    factors = h.factors

    def level_of(field: str, factor: str, level: str, level_field: str | None = None) -> None:
        if factor not in factors:
            problems.append((field, f"unknown factor {factor!r}; factors: {sorted(factors)}"))
        elif level not in factors[factor].levels:
            problems.append((level_field or field,
                             f"unknown level {level!r} of factor {factor!r}; levels: {sorted(factors[factor].levels)}"))

    seen: set[str] = set()
    for i, p in enumerate(h.predictions):
        base = f"predictions[{i}]"
        if p.id in seen:
            problems.append((f"{base}.id", f"duplicate prediction id {p.id!r}"))
        seen.add(p.id)
        for k, v in p.where.items():
            level_of(f"{base}.where.{k}", k, v)
        if isinstance(p, Launches):
            continue
        level_of(f"{base}.factor", p.factor, p.level, f"{base}.level")
        if p.factor in factors and p.level == factors[p.factor].reference:
            problems.append((f"{base}.level", f"{p.level!r} is the reference of {p.factor!r}; compare another level"))
        if p.factor in p.where:
            problems.append((f"{base}.where.{p.factor}", "the compared factor cannot also be pinned by where"))
        pinned = {p.factor, *p.where}
        if isinstance(p, Interaction):
            if p.by == p.factor:
                problems.append((f"{base}.by", "an interaction needs a second factor"))
            level_of(f"{base}.by", p.by, p.by_level, f"{base}.by_level")
            if p.by_reference is not None:
                level_of(f"{base}.by_reference", p.by, p.by_reference)
            if p.by in factors and (p.by_reference or factors[p.by].reference) == p.by_level:
                problems.append((f"{base}.by_level", "by_level and by_reference must differ"))
            pinned.add(p.by)
        if getattr(p, "estimand", "mean") == "typical" and h.design.analysis == "anytime":
            problems.append((f"{base}.estimand", TYPICAL_NOT_ANYTIME))
        if isinstance(p, Outputs) and p.min_agreement < 1.0 and h.design.analysis == "anytime":
            problems.append((f"{base}.min_agreement", OUTPUTS_NOT_ANYTIME))
        free = sorted(set(factors) - pinned)
        if free:
            problems.append((f"{base}.where", f"factor(s) {free} must be pinned to one level with where"))
    return problems


TYPICAL_NOT_ANYTIME = ("estimand typical has no anytime-valid test; use design.analysis welch, rank or bootstrap "
                       "(each decides it with the Hodges-Lehmann shift), or estimand mean")


OUTPUTS_NOT_ANYTIME = ("an agreement bound below 1.0 has no anytime-valid test; use design.analysis welch, rank or "
                       "bootstrap, or min_agreement 1.0 (any mismatch refutes it, at any look)")


def effective_reference(h: Hypothesis, p: Interaction) -> str:
    return p.by_reference or h.factors[p.by].reference


# --------------------------------------------------------------------------- YAML loading


def parse_yaml(text: str, file: str | Path) -> Any:
    """Parse YAML text within framework.core.yamlio's limits; any problem becomes a SpecError with the line
    and column."""
    try:
        return yamlio.load(text)
    except yamlio.YamlProblem as exc:
        raise SpecError(file, exc.where, exc.message) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(file, where or "yaml", f"invalid YAML: {problem}") from None


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in PREDICTION_KINDS and i >= 2 and loc[i - 2] == "predictions" and isinstance(loc[i - 1], int):
            continue  # the discriminated union's tag, not a field the user wrote
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def validate_model(model: type[BaseModel], data: Any, file: str | Path) -> Any:
    """Validate parsed YAML against a model; the first error becomes a SpecError naming the field."""
    if not isinstance(data, dict):
        raise SpecError(file, "(top level)", f"expected a mapping of fields, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = _allowed_fields(model, err["loc"][:-1])
            msg = f"unknown field; allowed: {allowed}" if allowed else "unknown field"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown prediction kind; allowed: {list(PREDICTION_KINDS)}"
        elif err["type"] == "union_tag_not_found":
            msg = f"missing 'kind'; allowed: {list(PREDICTION_KINDS)}"
        elif err["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be")
        return _raise(file, _field_path(err["loc"]), msg, err.get("input"))


def _raise(file: str | Path, field: str, msg: str, value: Any) -> Any:
    if value is not None and not isinstance(value, (dict, list)) and "got" not in msg:
        msg = f"{msg} (got {value!r})"
    raise SpecError(file, field, msg)


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Walk the model's type annotations along `loc` to list the fields allowed where an unknown one was."""
    kinds = {c.model_fields["kind"].annotation.__args__[0]: c
             for c in (Equivalent, Increase, Decrease, Interaction, Launches, Outputs)}
    current: Any = model
    for part in loc:
        origin = get_origin(current)
        if origin is Annotated:
            current = get_args(current)[0]
            origin = get_origin(current)
        if origin in (dict, list):
            current = get_args(current)[-1]
        elif origin is Union or isinstance(current, types.UnionType):
            models = [a for a in get_args(current) if isinstance(a, type) and issubclass(a, BaseModel)]
            current = kinds.get(part) if part in kinds else models[0].model_fields[part].annotation \
                if len(models) == 1 and part in models[0].model_fields else None
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        else:
            return []
        if get_origin(current) is Annotated:
            current = get_args(current)[0]
    return sorted(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []


def load_experiment(path: Path) -> Experiment:
    text = _read(path)
    return validate_model(Experiment, parse_yaml(text, path), path)


def load_hypothesis(path: Path) -> Hypothesis:
    text = _read(path)
    h: Hypothesis = validate_model(Hypothesis, parse_yaml(text, path), path)
    problems = check_hypothesis(h)
    if problems:
        raise SpecError(path, *problems[0])
    return h


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "", f"cannot read: {exc}") from None
