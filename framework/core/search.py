"""The `search:` block of a hypothesis file: the space, the goal, the budget and the confirmation.

A search explores configurations (each candidate is launched, the launch is the unit) and then
confirms its winner on fresh launches under a hypothesis registered before them. Everything the
search depends on is declared here, before it starts, and checked by pydantic at the boundary so a
bad block is one line naming the file, the field and what is allowed (exit 2) before any server
starts. The confirmation's minimum effect is part of the declaration: it cannot be chosen after
seeing the exploration.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from framework.core.metrics import check_metric
from framework.core.workload import Workload

MAX_GRID = 100_000  # points in the exhaustive grid of a space: a search is for spaces one can still count
# Launches of one point a search can use: its exploration gives a point launches_per_candidate, the race gives the
# contenders more until the leader has beaten them; past 20 launches of one point the race separates nothing a
# confirmation (fresh launches) would not have to show again. A budget above points x this is capped, and says so.
MAX_LAUNCHES_PER_POINT = 20
CONSTRAINT = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w.]*)\s*(?P<op><=|>=)\s*(?P<bound>[-+0-9.eE]+)\s*$")

Value = bool | int | float | str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Strict):
    """Integers from `low` to `high` inclusive, every `step`th."""

    low: int
    high: int
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> "IntRange":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


class Dimension(_Strict):
    """One axis of the space: an engine flag in the engine's own name, or a workload setting.

    A flag with `values: [false, true]` is a switch (present or absent); any other value is the
    flag's argument. `range` is a shorthand for integer values.
    """

    flag: str | None = None
    workload: str | None = None
    values: list[Value] | None = None
    range: IntRange | None = None

    @model_validator(mode="after")
    def _one_of_each(self) -> "Dimension":
        if (self.flag is None) == (self.workload is None):
            raise ValueError("give exactly one of flag (an engine flag, e.g. --speculative-num-steps) or "
                             f"workload (one of {sorted(Workload.model_fields)})")
        if (self.values is None) == (self.range is None):
            raise ValueError("give exactly one of values (a list) or range ({low, high, step})")
        vals = self.all_values()
        if not vals:
            raise ValueError("values: at least one value is needed")
        if len({_text(v) for v in vals}) != len(vals):
            raise ValueError(f"values repeat: {vals}")
        if self.flag is not None:
            if not self.flag.startswith("-"):
                raise ValueError(f"flag must be a command-line flag starting with '-' (got {self.flag!r})")
            if any(isinstance(v, bool) for v in vals) and not all(isinstance(v, bool) for v in vals):
                raise ValueError("a switch takes values [false, true]; do not mix booleans with other values")
        else:
            if self.workload not in Workload.model_fields:
                raise ValueError(f"unknown workload field {self.workload!r}; allowed: {sorted(Workload.model_fields)}")
            for v in vals:
                try:
                    Workload.model_validate({self.workload: v})
                except ValidationError as exc:
                    msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
                    raise ValueError(f"workload.{self.workload} = {v!r}: {msg}") from None
        return self

    def all_values(self) -> list[Value]:
        return list(self.range.values()) if self.range is not None else list(self.values or [])

    def level_name(self, value: Value) -> str:
        return _text(value)

    def level(self, value: Value) -> dict[str, Any]:
        """The hypothesis level (framework.core.spec.Level's fields) that sets this value."""
        if self.workload is not None:
            return {"workload": {self.workload: value}}
        if isinstance(value, bool):
            return {"server_args": [self.flag] if value else []}
        return {"server_args": [self.flag, _text(value)]}


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Constraint(BaseModel):
    """`METRIC <= BOUND` or `METRIC >= BOUND` on a candidate's mean over its launches (an SLO)."""

    model_config = ConfigDict(frozen=True)
    metric: str
    op: Literal["<=", ">="]
    bound: float

    def slack(self, value: float) -> float:
        """<= 0 when met (Optuna's convention for constraints), the violation otherwise."""
        return value - self.bound if self.op == "<=" else self.bound - value

    def text(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: str) -> Constraint:
    m = CONSTRAINT.match(str(text))
    if not m:
        raise ValueError(f"constraint {text!r}: write METRIC <= NUMBER or METRIC >= NUMBER, e.g. 'ttft_s.p99 <= 0.5'")
    problem = check_metric(m["metric"])
    if problem:
        raise ValueError(f"constraint {text!r}: {problem}")
    try:
        bound = float(m["bound"])
    except ValueError:
        raise ValueError(f"constraint {text!r}: {m['bound']!r} is not a number") from None
    if not math.isfinite(bound):
        raise ValueError(f"constraint {text!r}: the bound must be finite")
    return Constraint(metric=m["metric"], op=m["op"], bound=bound)  # type: ignore[arg-type]


Direction = Literal["maximize", "minimize"]  # which way a metric is better (throughput up, latency down)


class Objective(_Strict):
    """One metric a search optimizes and which way is better: the goal's, or the second of a Pareto front
    (framework.stats.pareto takes these too)."""

    metric: str
    direction: Direction

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        problem = check_metric(value)
        if problem:
            raise ValueError(problem)
        return value


class Goal(Objective):
    """What the search looks for: the best `metric` in `direction` among the candidates meeting every
    constraint; with `pareto_with`, the front of the two metrics (the winner is the front's best in
    `metric` among those meeting the constraints)."""

    constraints: list[str] = []
    pareto_with: Objective | None = None

    @field_validator("constraints")
    @classmethod
    def _parse(cls, value: list[str]) -> list[str]:
        for c in value:
            parse_constraint(c)
        return value

    def parsed_constraints(self) -> list[Constraint]:
        return [parse_constraint(c) for c in self.constraints]

    def objectives(self) -> list[Objective]:
        first = Objective(metric=self.metric, direction=self.direction)
        return [first] + ([self.pareto_with] if self.pareto_with is not None else [])


class Budget(_Strict):
    """How much exploration may cost: launches (each one a server start), and optionally GPU hours
    (each launch's measured wall time times the experiment's GPUs). `refine` launches of the
    `launches` go to the leading candidates at the end (default a quarter)."""

    launches: int = Field(ge=2, le=10_000)
    gpu_hours: float | None = Field(None, gt=0)
    refine: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _refine_fits(self) -> "Budget":
        if self.refine is not None and self.refine >= self.launches:
            raise ValueError(f"refine ({self.refine}) must leave launches to explore (launches: {self.launches})")
        return self

    def refine_launches(self) -> int:
        return self.refine if self.refine is not None else self.launches // 4


class Confirm(_Strict):
    """The confirmatory run, declared before the search: the winner (or the `top` few, at alpha / top
    each) must beat the reference by at least `min_effect` on fresh launches. Unset design fields
    are the hypothesis's."""

    min_effect: float = Field(ge=0, lt=1)
    top: int = Field(1, ge=1, le=10)
    launches: int | None = Field(None, ge=2, le=1000)
    requests: int | None = Field(None, ge=1, le=100_000)
    warmup: int | None = Field(None, ge=0, le=10_000)
    alpha: float | None = Field(None, gt=0, lt=0.5)
    sequential: bool | None = None


class Select(_Strict):
    """The search's final stage, declared before it starts: ranking and selection (Kim & Nelson's KN,
    framework.stats.ranking) among the exploration's best `finalists` on fresh launches, so that the chosen one
    is the best, or within `delta` of it, with probability at least 1 - alpha whenever the best leads the other
    finalists by `delta` (docs/statistics.md, "Selection with a guarantee")."""

    delta: float = Field(gt=0, lt=1)  # the indifference zone, relative: 0.01 is 1% of the goal's metric
    finalists: int = Field(2, ge=2, le=10)
    first_stage: int = Field(5, ge=2, le=100)  # KN's n0: fresh launches of every finalist before any elimination
    max_launches: int = Field(MAX_LAUNCHES_PER_POINT, ge=2, le=1000)  # fresh launches of one finalist at most
    alpha: float | None = Field(None, gt=0, lt=0.5)  # 1 - PCS; unset: the hypothesis's design.alpha

    @model_validator(mode="after")
    def _stage_fits(self) -> "Select":
        if self.first_stage > self.max_launches:
            raise ValueError(f"first_stage ({self.first_stage}) is above max_launches ({self.max_launches})")
        return self

    def log_delta(self) -> float:
        return math.log1p(self.delta)


class SearchBlock(_Strict):
    """The search a hypothesis file declares (docs: README, "Search")."""

    space: dict[str, Dimension]
    reference: dict[str, Value]  # the configuration to beat: a value of every dimension (a point of the grid)
    goal: Goal
    budget: Budget
    launches_per_candidate: int = Field(2, ge=2, le=100)  # the unit: Optuna sees every launch, so the noise
    confirm: Confirm
    select: Select | None = None  # the final stage with a guarantee; unset: the exploration's best is chosen
    sampler: Literal["tpe", "random"] = "tpe"
    startup_trials: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**32)

    @field_validator("space")
    @classmethod
    def _some_dimensions(cls, value: dict[str, Dimension]) -> dict[str, Dimension]:
        if not value:
            raise ValueError("at least one dimension is needed")
        size = math.prod(len(d.all_values()) for d in value.values())
        if size > MAX_GRID:
            raise ValueError(f"the space has {size} points; at most {MAX_GRID}")
        return value

    @model_validator(mode="after")
    def _reference_in_space(self) -> "SearchBlock":
        missing = [n for n in self.space if n not in self.reference]
        if missing:
            raise ValueError(f"reference: give a value of every dimension (the configuration to beat); "
                             f"missing {missing}")
        for name, value in self.reference.items():
            if name not in self.space:
                raise ValueError(f"reference.{name}: not a dimension of the space; dimensions: {sorted(self.space)}")
            allowed = [_text(v) for v in self.space[name].all_values()]
            if _text(value) not in allowed:
                raise ValueError(f"reference.{name}: {value!r} is not one of its values {allowed}")
        if self.select is not None and self.budget.refine:
            raise ValueError("budget.refine: a search with select: races its finalists on fresh launches (KN); "
                             "leave refine unset or 0")
        for i, c in enumerate(self.goal.parsed_constraints()):
            if c.metric == self.goal.metric:
                raise ValueError(f"goal.constraints[{i}]: constrains the goal's own metric {c.metric}")
        return self

    def explore_launches(self) -> int:
        """Launches the exploration may spend: all of the budget with `select` (its fresh launches come on top,
        at most `finalists x max_launches`), else the budget less the racing's `refine`."""
        return self.budget.launches if self.select is not None else self.budget.launches - self.budget.refine_launches()

    def select_launches(self) -> int:
        """The most fresh launches the final selection may spend (0 without `select`)."""
        return 0 if self.select is None else self.select.finalists * self.select.max_launches

    def grid_size(self) -> int:
        return math.prod(len(d.all_values()) for d in self.space.values())

    def grid_launches(self) -> int:
        """What an exhaustive grid at the same launches per point would cost."""
        return self.grid_size() * self.launches_per_candidate

    def usable_launches(self) -> int:
        """The most launches this space can use: every point at MAX_LAUNCHES_PER_POINT (or its unit, if larger)."""
        return self.grid_size() * max(MAX_LAUNCHES_PER_POINT, self.launches_per_candidate)

    def capped(self) -> "SearchBlock":
        """The same search with a budget no larger than the space can use (`usable_launches`); itself otherwise.
        An explicit `refine` keeps launches to explore."""
        usable = self.usable_launches()
        if self.budget.launches <= usable:
            return self
        refine = None if self.budget.refine is None else min(self.budget.refine, usable - 1)
        return self.model_copy(update={"budget": self.budget.model_copy(update={"launches": usable,
                                                                                "refine": refine})})

    def reference_point(self) -> dict[str, str]:
        return {n: _text(self.reference[n]) for n in self.space}

    def points(self) -> list[dict[str, str]]:
        """Every point of the grid as {dimension: level name}, in the file's order."""
        names = list(self.space)
        combos = itertools.product(*([self.space[n].level_name(v) for v in self.space[n].all_values()] for n in names))
        return [dict(zip(names, c, strict=True)) for c in combos]
