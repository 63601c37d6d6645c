"""Multiplicity across hypotheses (a sweep): Holm or Benjamini-Hochberg adjusted p-values.

Within one hypothesis no correction is needed: the hypothesis is supported only if every prediction
is, an intersection-union test (Berger 1982) whose level is at most the largest level of its parts.
Across a sweep, each job's verdict is a separate claim, and reading the best of many at alpha each
inflates the error:

- ``holm`` (Holm 1979): controls the family-wise error rate, the probability of any false claim.
  Use for confirmatory sweeps, where each "supported" will be acted on. Uniformly more powerful than
  Bonferroni, valid under any dependence.
- ``fdr_bh`` (Benjamini & Hochberg 1995): controls the expected share of false claims among the
  claims made. Use for exploratory sweeps (screening many flags for candidates to confirm later).
  Valid for independent or positively dependent p-values (PRDS).

A thin wrapper of statsmodels `multipletests`.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from framework.core.vocabulary import MULTIPLICITY_METHODS

METHODS = MULTIPLICITY_METHODS


class Adjusted(NamedTuple):
    p_adjusted: list[float]
    reject: list[bool]


def adjust(p_values: Sequence[float], method: str = "holm", alpha: float = 0.05) -> Adjusted:
    """Adjusted p-values and reject flags (reject iff adjusted p <= alpha) for a family of tests."""
    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; allowed: {list(METHODS)}")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    ps = [float(p) for p in p_values]
    if not ps:
        return Adjusted([], [])
    if any(not 0 <= p <= 1 for p in ps):
        raise ValueError("p-values must be in [0, 1]")
    from statsmodels.stats.multitest import multipletests

    reject, p_adj, _, _ = multipletests(ps, alpha=alpha, method=method)
    return Adjusted([float(p) for p in p_adj], [bool(r) for r in reject])
