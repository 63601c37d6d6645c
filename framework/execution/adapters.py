"""The model adapter a backend row names: what the run path asks of a simulated server beyond HTTP.

A row's `adapter` is a module path, imported only when a run needs it (the way lm-evaluation-harness's
registry names its targets), so nothing outside `framework.servers` imports the servers and a new
simulated backend adds a row and a module, not a branch. An adapter module provides these pure
functions (see `framework.servers.sim.adapter`):

- ``coverage(h, exp) -> dict``: what it does not model here (``problems``, ``refused`` and the record's fields);
- ``timing(h, exp, rows, *, launched) -> dict``: how honest its clock was (the record's ``analysis.sim_*``);
- ``warnings(h, timing, speedup) -> list[str]`` and ``marks(h, prediction, timing) -> list[str]``;
- ``plan_assumptions(h, exp, *, measurement) -> (dict, str)``: its model of a profile, for ``plan``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from framework.execution.backends import BACKENDS, Backend

# the record's timing fields when no model stands behind the figures (a real server)
NO_TIMING: dict[str, Any] = {
    "sim_max_relative_lag": None, "sim_metric_relative_lag_median": None, "sim_metric_relative_lag_max": None,
    "sim_clock_bias": {}, "sim_clock_bias_max": None, "sim_open_loop_arrival_late": None,
}


def load(name: str | None) -> ModuleType | None:
    return importlib.import_module(name) if name else None


def for_row(row: Backend) -> ModuleType | None:
    """The adapter of a backend the run starts itself."""
    return load(row.adapter)


def for_server(row: Backend, server_info: dict[str, Any] | None) -> ModuleType | None:
    """The row's adapter, else the one of the backend a server says it is (an endpoint that is the sim)."""
    if row.adapter:
        return load(row.adapter)
    said = (server_info or {}).get("backend")
    other = BACKENDS.get(said) if isinstance(said, str) else None
    return load(other.adapter) if other is not None else None


def planning_model(row: Backend | None = None) -> ModuleType:
    """The model `plan` asks without a pilot: the row's own, else the simulator's model of the experiment's
    hardware profile (the only model the project ships)."""
    adapter = (for_row(row) if row is not None else None) or for_row(BACKENDS["sim"])
    assert adapter is not None, "the sim row names its adapter"
    return adapter
