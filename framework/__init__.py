"""Hypothesis-driven experiments for LLM-serving performance.

Declare a hypothesis (hypotheses/*.yaml), run it with `python -m framework run hypothesis=NAME`
against the embedded simulated SGLang server or a real one, and get per-prediction verdicts
(supported / refuted / inconclusive) recorded in an auditable ledger.

The public face for use from Python is small and pinned by tests/test_exported_members.py: load a
hypothesis or an experiment, read a trials file, analyse its rows, audit a ledger. Names are loaded
on first use, so `python -m framework.sim` and the launcher's watchdog stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.3.0"

_EXPORTS = {
    "load_hypothesis": "framework.core.spec",
    "load_experiment": "framework.core.spec",
    "Hypothesis": "framework.core.spec",
    "Experiment": "framework.core.spec",
    "read_trials": "framework.records.trials",
    "Trials": "framework.core.trials",
    "analyze": "framework.analysis.verdicts",
    "Analysis": "framework.analysis.verdicts",
    "audit": "framework.records.audit",
    "FrameworkError": "framework.errors",
    "UserError": "framework.errors",
    "SpecError": "framework.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'framework' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return list(__all__)
