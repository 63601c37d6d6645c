"""Hypothesis-driven experiments for LLM-serving performance.

Declare a hypothesis (hypotheses/*.yaml), run it with `python -m framework run hypothesis=NAME`
against the embedded simulated SGLang server or a real one, and get per-prediction verdicts
(supported / refuted / inconclusive) recorded in an auditable ledger.

The public face for use from Python is small: load a hypothesis, analyse trial rows.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "load_experiment", "load_hypothesis"]


def __getattr__(name: str):  # lazy, so `python -m framework.servers.sim` and the watchdog stay light
    if name == "analyze":
        from framework.analysis.verdicts import analyze

        return analyze
    if name in ("load_hypothesis", "load_experiment"):
        from framework.core import spec

        return getattr(spec, name)
    raise AttributeError(name)
