"""Pareto front of two metrics with uncertainty: per-point intervals and dominance beyond chance.

Why not just the front of the point estimates: with 3-5 launches per candidate, two candidates a
percent apart on both metrics trade places from one exploration to the next, so the naive front says
which points *looked* dominated, not which are. A point is **dominated with confidence** when some
other point is better on both metrics beyond chance. Per ordered pair (i, j) that is an
intersection-union test (Berger 1982): "i better than j on metric 1" and "on metric 2", each a
one-sided Welch test of the log ratio of geometric means at level `alpha` (the framework's effect
estimator, `effects.welch`), the pair's p-value the larger of the two, no correction across the two
metrics needed. Across the K(K-1) ordered pairs tested the p-values are adjusted by Holm (1979),
through `multiplicity.adjust`, so P(any point wrongly declared dominated) <= alpha under any
dependence. The launch is the unit and the log the scale (docs/statistics.md, sections 1 and 11).

Inputs are launch-level values (one value per launch per metric, e.g. the launch mean of a metric),
never pooled requests. Pure functions over plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import special

from framework.core.search import Direction, Objective
from framework.stats import effects, multiplicity


@dataclass(frozen=True)
class Sample:
    """What the front sees of one explored configuration (a search's candidate, framework.analysis.search):
    its name and, per metric, its per-launch values (metric units, > 0; one per launch)."""

    name: str
    values: Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class PointEstimate:
    """A candidate's geometric mean over launches of one metric, with its (1 - 2 alpha) t interval.

    The interval is exp(mean log +/- t_{1-alpha, n-1} s / sqrt(n)); `ci` is None with fewer than 2 launches.
    """

    metric: str
    n: int
    estimate: float  # geometric mean, metric units
    ci: tuple[float, float] | None  # two-sided (1 - 2 alpha), metric units
    log_mean: float
    log_se: float | None


@dataclass(frozen=True)
class Dominance:
    """The test of "`better` beats `worse` on both metrics" (one ordered pair)."""

    better: str
    worse: str
    p_value: float  # intersection-union p: the larger of the two one-sided Welch p-values (1.0 if untestable)
    p_adjusted: float  # after the correction across every ordered pair
    confident: bool  # p_adjusted <= alpha


@dataclass(frozen=True)
class FrontPoint:
    name: str
    estimates: tuple[PointEstimate, PointEstimate]  # in the objectives' order
    on_naive_front: bool  # no other point's estimates are at least as good on both and better on one
    dominated_with_confidence: bool
    dominated_by: tuple[str, ...]  # the points that dominate it with confidence


@dataclass(frozen=True)
class Front:
    """The front of two objectives (the caller's, in that order: the estimates' order)."""

    alpha: float  # one-sided level of each test; intervals are (1 - 2 alpha)
    correction: str  # multiplicity method over the ordered pairs ("holm")
    points: tuple[FrontPoint, ...]  # in the candidates' order
    pairs: tuple[Dominance, ...]  # every ordered pair, in the order tested
    naive_front: tuple[str, ...]  # names on the front of the point estimates
    confident_front: tuple[str, ...]  # names not dominated with confidence (contains the naive front)


def point_estimate(metric: str, values: Sequence[float], alpha: float = 0.05) -> PointEstimate:
    """The geometric mean of per-launch values with its (1 - 2 alpha) t interval on the log scale."""
    x = effects.log_values(values)
    n = len(x)
    if n == 0:
        raise ValueError(f"metric {metric!r}: no launch values")
    m = float(x.mean())
    if n < 2:
        return PointEstimate(metric, n, math.exp(m), None, m, None)
    se = float(np.std(x, ddof=1) / math.sqrt(n))
    q = float(special.stdtrit(n - 1, 1 - alpha))
    return PointEstimate(metric, n, math.exp(m), (math.exp(m - q * se), math.exp(m + q * se)), m, se)


def _better_p(x: Sequence[float], y: Sequence[float], direction: Direction) -> float:
    """One-sided Welch p of "x better than y" on the log scale; 1.0 when either has fewer than 2 launches."""
    if len(x) < 2 or len(y) < 2:
        return 1.0
    eff = effects.welch(effects.log_values(x), effects.log_values(y))
    return eff.p_above(0.0) if direction == "maximize" else eff.p_below(0.0)


def _naive_dominates(a: tuple[float, float], b: tuple[float, float], objs: tuple[Objective, Objective]) -> bool:
    signs = [1.0 if o.direction == "maximize" else -1.0 for o in objs]
    ge = all(s * u >= s * v for s, u, v in zip(signs, a, b, strict=True))
    gt = any(s * u > s * v for s, u, v in zip(signs, a, b, strict=True))
    return ge and gt


def pareto_front(candidates: Sequence[Sample], objectives: tuple[Objective, Objective], alpha: float = 0.05,
                 correction: str = "holm") -> Front:
    """The naive front, per-point intervals, and which points are dominated with confidence.

    `correction` is a `multiplicity` method over the K(K-1) ordered pairs (`holm` controls the
    family-wise error: no point is wrongly called dominated with probability above alpha).
    """
    if len(objectives) != 2 or objectives[0].metric == objectives[1].metric:
        raise ValueError("a front needs two different metrics")
    if not 0 < alpha < 0.5:
        raise ValueError("alpha must be in (0, 0.5)")
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError("candidate names must be unique")
    for c in candidates:
        for o in objectives:
            if o.metric not in c.values:
                raise ValueError(f"candidate {c.name!r} has no values of {o.metric!r}")
    ests = [tuple(point_estimate(o.metric, c.values[o.metric], alpha) for o in objectives) for c in candidates]
    centres = [(e[0].estimate, e[1].estimate) for e in ests]
    order: list[tuple[int, int]] = [(i, j) for i in range(len(candidates)) for j in range(len(candidates)) if i != j]
    raw = [max(_better_p(candidates[i].values[o.metric], candidates[j].values[o.metric], o.direction)
               for o in objectives) for i, j in order]
    adj = multiplicity.adjust(raw, correction, alpha) if raw else multiplicity.Adjusted([], [])
    pairs = tuple(Dominance(names[i], names[j], p, pa, r)
                  for (i, j), p, pa, r in zip(order, raw, adj.p_adjusted, adj.reject, strict=True))
    points = []
    for j, c in enumerate(candidates):
        by = tuple(d.better for d in pairs if d.worse == c.name and d.confident)
        naive = not any(_naive_dominates(centres[i], centres[j], objectives) for i in range(len(candidates)) if i != j)
        points.append(FrontPoint(c.name, (ests[j][0], ests[j][1]), naive, bool(by), by))
    return Front(alpha, correction, tuple(points), pairs,
                 tuple(p.name for p in points if p.on_naive_front),
                 tuple(p.name for p in points if not p.dominated_with_confidence))
