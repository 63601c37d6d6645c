"""SLO capacity: the highest load (request rate or concurrency) that meets an SLO, with a lower bound.

Why a bound and not the crossing point alone: "meets p99 TTFT <= 0.5 s up to 8 req/s" from one or
three launches per level is a noisy reading of a curve; the lower confidence bound is the load the
data support beyond chance. The SLO is on the geometric mean over launches of a launch-level metric
(e.g. each launch's p99 TTFT), on the log scale like every comparison (docs/statistics.md, sections
1 and 11).

- **Point estimate.** The per-level log means are fitted by isotonic regression (pool-adjacent
  violators, weighted by launches; scipy `isotonic_regression`): the metric is non-decreasing in load
  for an `<=` SLO (latency rises with load), non-increasing for `>=` (per-user throughput falls). The
  estimate is the highest ladder level whose fitted value meets the SLO; `interpolated` is the
  log-linear crossing between it and the next level.
- **Lower confidence bound: a fixed-sequence step-down** (Maurer, Hothorn & Lehmacher 1995; Westfall
  & Krishen 2001). In increasing load, test H0_k "level k fails the SLO" by the one-sided t test of
  the level's mean log value against log(threshold) at level `alpha` (reject iff the one-sided
  (1 - alpha) bound meets the SLO); stop at the first level not rejected. The bound is the last
  level rejected. Since the first failing level's H0 is true, the bound exceeds the true capacity
  (the highest level below which every level meets the SLO) only if that true H0 is rejected, so
  P(bound <= true capacity) >= 1 - alpha, with no monotonicity assumption and no correction for
  the number of levels. Coverage is exactly 1 - alpha when the first failing level sits on the
  threshold and the levels below it are clear of it; otherwise it is higher.

- **Caveat: a thin margin** (`thin_margin`, issue 33). The guarantee is for the geometric mean over
  launches. A level whose launches have a rare slow mode that n launches did not see is confirmed on
  its typical launches while its mean over launches fails: with a mode of share 0.1 and launches
  1.25x slower at the first failing level, the bound covered the true capacity in about 0.4 of ladders
  (docs/statistics.md section 11). No test sees a mode that did not occur (Bahadur & Savage 1956), so
  the bound says when it rests on little: a confirmed level whose geometric mean clears the threshold by
  less than `THIN_MARGIN` (5%, fixed before the calibration) carries a caveat that names the level, its
  launches, the largest mode share they miss with probability 5% or more (1 - 0.05^(1/n)) and the
  slowdown of such a mode that would make the level fail the SLO. Levels clear of the threshold by more
  carry none.

Inputs are launch-level values. Pure functions over plain data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from scipy import special
from scipy.optimize import isotonic_regression

from framework.stats import effects

SloOp = Literal["<=", ">="]
THIN_MARGIN = 0.05  # a confirmed level that clears the SLO by less than this (relative) carries a caveat
MISS_PROB = 0.05  # the largest mode share n launches miss with at least this probability is 1 - MISS_PROB^(1/n)


@dataclass(frozen=True)
class LoadLevel:
    """A rung of the ladder: the load (req/s or concurrency, the caller's unit), per-launch SLO metric values (> 0)."""

    load: float
    values: Sequence[float]


@dataclass(frozen=True)
class LevelResult:
    load: float
    n: int  # launches
    estimate: float  # geometric mean over launches, metric units
    fitted: float  # isotonic fit of the geometric means, metric units
    bound: float | None  # one-sided (1 - alpha) bound on the SLO's side (upper for <=, lower for >=); None if n < 2
    p_value: float | None  # one-sided t test of H0 "this level fails the SLO"; None if n < 2
    meets_estimate: bool  # the fitted value meets the SLO
    confirmed: bool  # rejected in the step-down (every lower level rejected too)


@dataclass(frozen=True)
class Capacity:
    op: SloOp
    threshold: float
    alpha: float
    levels: tuple[LevelResult, ...]  # ascending load
    estimate: float | None  # highest ladder load whose fitted value meets the SLO; None if not even the lowest
    interpolated: float | None  # log-linear crossing of the fit beyond `estimate` (None at either end of the ladder)
    lower_bound: float | None  # highest load confirmed by the step-down; None if the lowest is not confirmed
    coverage: float  # P(lower_bound <= true capacity) >= coverage = 1 - alpha
    caveats: tuple[dict, ...] = ()  # a confirmed level that clears the SLO by less than THIN_MARGIN (`thin_margin`)


def thin_margin(levels: Sequence[LevelResult], threshold: float, op: SloOp) -> tuple[dict, ...]:
    """The caveat of the lowest confirmed level whose geometric mean clears the threshold by less than THIN_MARGIN:
    what a launch mode unseen in its launches would need to make it fail; () when every confirmed level is clear."""
    for r in levels:
        if not r.confirmed:
            break
        clear = threshold / r.estimate if op == "<=" else r.estimate / threshold  # > 1: meets, by this factor
        if clear >= 1.0 + THIN_MARGIN:
            continue
        share = 1.0 - MISS_PROB ** (1.0 / r.n)
        factor = math.exp(math.log(max(clear, 1.0)) / share)
        way = "slower" if op == "<=" else "lower"
        text = (f"thin margin: load {r.load:g}, confirmed on {r.n} launches, clears the SLO by only "
                f"{clear - 1:.1%}; a launch mode of up to {share:.0%} of launches is unseen there with probability "
                f"{MISS_PROB:.0%} or more, and one with launches {factor:.3g}x {way} would make that level fail "
                f"the SLO in the geometric mean over launches: the bound holds for its typical launch, and "
                f"more launches at that level are needed for it to hold for the mean over launches")
        return ({"kind": "thin_margin", "load": r.load, "launches": r.n, "clears_by": clear - 1,
                 "unseen_share": share, "mode_factor": factor, "text": text},)
    return ()


def _level_test(x: np.ndarray, log_thr: float, op: SloOp, alpha: float) -> tuple[float | None, float | None]:
    """(one-sided bound on the log scale, p-value of H0 "fails the SLO") for one level's log values."""
    n = len(x)
    if n < 2:
        return None, None
    m, se = float(x.mean()), float(np.std(x, ddof=1) / math.sqrt(n))
    q = float(special.stdtrit(n - 1, 1 - alpha))
    if se == 0:
        meets = m <= log_thr if op == "<=" else m >= log_thr
        return m, 0.0 if meets else 1.0
    t = (m - log_thr) / se
    if op == "<=":
        return m + q * se, float(special.stdtr(n - 1, t))  # H0: mean >= thr; small p => below it
    return m - q * se, float(special.stdtr(n - 1, -t))


def slo_capacity(levels: Sequence[LoadLevel], threshold: float, op: SloOp = "<=", alpha: float = 0.05) -> Capacity:
    """The highest load meeting `metric op threshold`, its isotonic point estimate and step-down lower bound."""
    if op not in ("<=", ">="):
        raise ValueError(f"op must be '<=' or '>=', not {op!r}")
    if not 0 < alpha < 0.5:
        raise ValueError("alpha must be in (0, 0.5)")
    if not threshold > 0 or not math.isfinite(threshold):
        raise ValueError("threshold must be finite and > 0 (the SLO is tested on the log scale)")
    ladder = sorted(levels, key=lambda lv: lv.load)
    if not ladder:
        raise ValueError("no load levels")
    if len({lv.load for lv in ladder}) != len(ladder):
        raise ValueError("load levels must be distinct")
    logs = [effects.log_values(lv.values) for lv in ladder]
    if any(len(x) == 0 for x in logs):
        raise ValueError("every load level needs at least one launch value")
    log_thr = math.log(threshold)
    means = np.array([x.mean() for x in logs])
    fit = isotonic_regression(means, weights=np.array([len(x) for x in logs], float), increasing=(op == "<=")).x
    meets = fit <= log_thr if op == "<=" else fit >= log_thr
    results: list[LevelResult] = []
    still = True
    for lv, x, f, ok in zip(ladder, logs, fit, meets, strict=True):
        bound, p = _level_test(x, log_thr, op, alpha)
        still = still and p is not None and p <= alpha
        results.append(LevelResult(float(lv.load), len(x), math.exp(float(x.mean())), math.exp(float(f)),
                                   None if bound is None else math.exp(bound), p, bool(ok), still))
    k = int(np.sum(meets))  # monotone fit: the meeting levels are a prefix
    estimate = float(ladder[k - 1].load) if k else None
    interpolated = None
    if 0 < k < len(ladder) and fit[k] != fit[k - 1]:
        lo, hi = float(ladder[k - 1].load), float(ladder[k].load)
        interpolated = lo + (log_thr - float(fit[k - 1])) / (float(fit[k]) - float(fit[k - 1])) * (hi - lo)
    confirmed = [r.load for r in results if r.confirmed]
    return Capacity(op, float(threshold), alpha, tuple(results), estimate, interpolated,
                    confirmed[-1] if confirmed else None, 1 - alpha, thin_margin(results, float(threshold), op))
