"""The model adapter a backend row names: what the run path asks of a simulated server beyond HTTP.

A row's `adapter` is a module path, imported only when a run needs it (the way lm-evaluation-harness's
registry names its targets), so nothing outside `framework.servers` imports the servers and a new
simulated backend adds a row and a module, not a branch. The module provides every function of
`ModelAdapter` (see `framework.servers.sim.adapter`), pure over plain data: the run shell decides what to
refuse, print and record. The accessors below hand it out typed as that protocol.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from framework.execution.backends import BACKENDS, Backend

if TYPE_CHECKING:
    from framework.core.spec import Experiment, Hypothesis

# the record's timing fields when no model stands behind the figures (a real server)
NO_TIMING: dict[str, Any] = {
    "sim_max_relative_lag": None, "sim_metric_relative_lag_median": None, "sim_metric_relative_lag_max": None,
    "sim_clock_bias": {}, "sim_clock_bias_max": None, "sim_open_loop_arrival_late": None,
}


class ModelAdapter(Protocol):
    """What the run, `plan` and `fit` ask of a simulated backend's model (an adapter module)."""

    def coverage(self, h: Hypothesis, exp: Experiment) -> dict[str, Any]:
        """What it does not model here: ``problems``, ``refused``, ``profile_problems`` and the record's fields."""
        ...

    def timing(self, h: Hypothesis, exp: Experiment, rows: list[dict[str, Any]], *,
               launched: bool = True) -> dict[str, Any]:
        """How honest its clock was (the record's ``analysis.sim_*``; `NO_TIMING`'s keys)."""
        ...

    def warnings(self, h: Hypothesis, lag: dict[str, Any], speedup: float) -> list[str]:
        """The run's warnings about that timing."""
        ...

    def marks(self, h: Hypothesis, prediction: dict[str, Any], lag: dict[str, Any]) -> list[str]:
        """A prediction's marks (its verdict could have been moved by the clock)."""
        ...

    def plan_assumptions(self, h: Hypothesis, exp: Experiment, *,
                         measurement: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
        """Its model of a profile, for ``plan``: (assumptions, where they come from)."""
        ...

    def profile_engine(self, path: Path) -> str | None:
        """The engine whose flag names a profile file's servers take (a twin fitted to llama.cpp or vLLM), None
        for its own; ValueError when the file cannot be read."""
        ...

    def is_twin(self, h: Hypothesis, exp: Experiment) -> bool:
        """Every condition runs a fitted twin profile."""
        ...

    def twin_predict(self, fit: Any, config: Any) -> dict[str, float]:
        """A fitted twin's noise-free launch means at a configuration (``fit``)."""
        ...

    def twin_engine_summary(self, config: Any) -> dict[str, Any]:
        """What a twin reads from a configuration's engine flags (``fit``'s pilots)."""
        ...

    def twin_predictions(self, h: Hypothesis, exp: Experiment, *, requests: int, warmup: int,
                         level: float = 0.9) -> dict[str, Any] | None:
        """Per condition, a twin's prediction interval of every metric; None unless it runs a twin profile."""
        ...

    def twin_plan_draws(self, h: Hypothesis, exp: Experiment, *, requests: int, warmup: int,
                        progress: Any = None) -> dict[str, Any]:
        """A twin's uncertainty for ``plan``: per parameter draw, each condition's launch mean of the metric."""
        ...


def load(name: str | None) -> ModelAdapter | None:
    return cast(ModelAdapter, importlib.import_module(name)) if name else None


def for_row(row: Backend) -> ModelAdapter | None:
    """The adapter of a backend the run starts itself."""
    return load(row.adapter)


def for_server(row: Backend, server_info: dict[str, Any] | None) -> ModelAdapter | None:
    """The row's adapter, else the one of the backend a server says it is (an endpoint that is the sim)."""
    if row.adapter:
        return load(row.adapter)
    said = (server_info or {}).get("backend")
    other = BACKENDS.get(said) if isinstance(said, str) else None
    return load(other.adapter) if other is not None else None


def planning_model(row: Backend | None = None) -> ModelAdapter:
    """The model `plan` asks without a pilot: the row's own, else the simulator's model of the experiment's
    hardware profile (the only model the project ships)."""
    adapter = (for_row(row) if row is not None else None) or for_row(BACKENDS["sim"])
    assert adapter is not None, "the sim row names its adapter"
    return adapter
