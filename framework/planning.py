"""Planning: how many launches per condition each prediction needs, and what that costs in wall time.

Pure functions. Given an assumed true metric per condition, the between-launch sd and the
within-launch (per-request) sd on the log scale, the power of each prediction's decision rule
(docs/statistics.md) is computed for n launches per condition (by simulating the rule's
sufficient statistics, see `power_of`) and the smallest n reaching the target power is reported. The power is "the probability of the verdict the assumed truth implies":
to be supported when the assumed effect satisfies the prediction, to be refuted when it does not.

A launch's log mean has variance s_L^2 = sd_launch^2 + sd_request_c^2 / requests; the contrast of
a prediction (two cells, or four for an interaction) has variance s_d^2 = sum_c s_L,c^2 / n, and
is judged with the Welch se and Welch-Satterthwaite df as in the analysis. Slow launches and other heavy tails are not in this model: pad the plan,
or plan from a pilot run (`plan_from_rows`), whose variance components include them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal

import numpy as np

from framework.design import conditions, matching
from framework.spec import Decrease, Equivalent, Hypothesis, Increase, Interaction, Launches, effective_reference

MAX_LAUNCHES = 1000


@dataclass(frozen=True)
class PlanRow:
    prediction: str
    kind: str
    assumed_effect: float | None  # ratio (ratio of ratios for an interaction)
    target: Literal["supported", "refuted"] | None  # the verdict the assumed effect implies
    launches_per_condition: int | None  # None: not reachable within MAX_LAUNCHES
    total_launches: int | None  # over every condition of the hypothesis (they all run, in blocks)
    expected_wall_s: float | None
    power: float | None  # at launches_per_condition
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- power

DRAWS = 20000  # simulated experiments per power evaluation: MC SE about 0.002 at power 0.9


def power_of(rule: str, *, effect_log: float, var_cells: list[float], weights: list[float], n: int, a: float,
             low: float | None = None, high: float | None = None, target: str = "supported",
             draws: int = DRAWS, seed: int = 0, slow_prob: float = 0.0, slow_factor: float = 1.0) -> float:
    """Probability that the Welch-based decision rule returns `target` when the true log effect is effect_log.

    Simulates the sufficient statistics of `draws` experiments (normal data: each cell's mean is
    normal, its variance a scaled chi2 with n - 1 df) and applies the rule exactly as the analysis
    does: Welch se, Welch-Satterthwaite df, t quantile at 1 - a. This is exact up to Monte Carlo
    error at every n, including the 2-4 launches where the se's own df matter most (an analytic
    noncentral-t formula with a fixed df overstates power there). Deterministic (seeded).

    rule: "up" (supported iff lower bound > low; refuted iff upper bound < low), "down" (supported
    iff upper bound < high; refuted iff lower bound > high), "equivalent" (bounds low, high).

    With `slow_prob` > 0 each launch is, with that probability, a slow launch whose metric is
    multiplied by `slow_factor` (e.g. 1/1.08 for a throughput, 1.08 for a latency); then whole
    launches are simulated (the mixture has no chi2 shortcut), with fewer draws.
    """
    from scipy import special

    rng = np.random.default_rng([seed, n])
    w = np.asarray(weights, float)
    v = np.asarray(var_cells, float)
    if slow_prob > 0 and slow_factor != 1.0:
        draws = min(draws, max(2000, 4_000_000 // (n * len(v))))
        x = rng.normal(0.0, 1.0, (draws, len(v), n)) * np.sqrt(v)[None, :, None]
        x += math.log(slow_factor) * (rng.random((draws, len(v), n)) < slow_prob)
        means, s2 = x.mean(axis=2), x.var(axis=2, ddof=1)
    else:
        means = rng.normal(0.0, 1.0, (draws, len(v))) * np.sqrt(v / n)
        s2 = v * rng.chisquare(n - 1, (draws, len(v))) / (n - 1)
    est = effect_log + means @ w
    terms = (w * w) * s2 / n
    se = np.sqrt(terms.sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = terms.sum(axis=1) ** 2 / ((terms ** 2) / (n - 1)).sum(axis=1)
    df = np.where(np.isfinite(df), df, len(v) * (n - 1))
    q = special.stdtrit(df, 1 - a)
    lo, hi = est - q * se, est + q * se
    if rule == "up":
        hit = (lo > low) if target == "supported" else (hi < low)
    elif rule == "down":
        hit = (hi < high) if target == "supported" else (lo > high)
    elif rule == "equivalent":
        hit = ((lo > low) & (hi < high)) if target == "supported" else ((hi < low) | (lo > high))
    else:
        raise ValueError(f"unknown rule {rule!r}")
    return float(np.mean(hit))


def launches_needed(rule: str, *, effect_log: float, var_cells: list[float], weights: list[float], a: float,
                    power: float, low: float | None = None, high: float | None = None, target: str = "supported",
                    max_n: int = MAX_LAUNCHES, slow_prob: float = 0.0,
                    slow_factor: float = 1.0) -> tuple[int | None, float]:
    """Smallest n >= 2 launches per condition with power >= `power`.

    Without slow launches power grows with n and a bisection finds it. With slow launches power is
    not monotone at small n (more launches, more chances that one slow launch widens the interval
    beyond a tight margin), so n is scanned upwards to 50 before bisecting above.
    """

    def pw(n: int) -> float:
        return power_of(rule, effect_log=effect_log, var_cells=var_cells, weights=weights, n=n, a=a,
                        low=low, high=high, target=target, slow_prob=slow_prob, slow_factor=slow_factor)

    lo = 2
    if slow_prob > 0:
        for n in range(2, min(50, max_n) + 1):
            p = pw(n)
            if p >= power:
                return n, p
        lo = min(50, max_n)
    top = pw(max_n)
    if top < power:
        return None, top
    hi = max_n
    if pw(lo) >= power:
        return lo, pw(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pw(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi, pw(hi)


# --------------------------------------------------------------------------- the plan


def _cell(h: Hypothesis, where: dict[str, str]) -> int:
    found = matching(conditions(h), where)
    if len(found) != 1:
        raise ValueError(f"where {where} selects {len(found)} conditions, expected 1")
    return found[0].index


def _per(value: dict[int, float] | float, c: int) -> float:
    return float(value[c]) if isinstance(value, dict) else float(value)


def plan(h: Hypothesis, *, means: dict[int, float], sd_launch_log: float | dict[int, float],
         sd_request_log: float | dict[int, float], requests: int | None = None, warmup: int | None = None,
         launch_cost_s: float | dict[int, float] = 0.0, request_cost_s: float | dict[int, float] = 0.0,
         power: float = 0.9, alpha: float | None = None, slow_launch_prob: float = 0.0,
         slow_launch_factor: float = 1.0) -> list[PlanRow]:
    """Launches per condition for `power` on each prediction, and the wall time of running that many.

    `means[c]`: the assumed metric of condition c (its index in `design.conditions(h)`); sds are on the
    log scale (0.006 = 0.6%), per condition where a dict. `slow_launch_prob` / `slow_launch_factor`
    add occasional slow launches (the metric multiplied by the factor: 1/1.08 for a throughput that
    drops 8%), which matter a lot for tight equivalence margins. Wall time = n * sum over conditions of
    (launch cost + (requests + warmup) * request cost): every condition runs n launches.
    """
    alpha = h.design.alpha if alpha is None else float(alpha)
    requests = h.design.requests if requests is None else int(requests)
    warmup = h.design.warmup if warmup is None else int(warmup)
    conds = conditions(h)
    per_round = sum(_per(launch_cost_s, c.index) + (requests + warmup) * _per(request_cost_s, c.index) for c in conds)

    def var(c: int) -> float:
        return _per(sd_launch_log, c) ** 2 + _per(sd_request_log, c) ** 2 / requests

    rows: list[PlanRow] = []
    for p in h.predictions:
        if isinstance(p, Launches):
            rows.append(PlanRow(p.id, p.kind, None, None, 1, len(conds), per_round, None,
                                "launch outcomes are counts: one launch decides a deterministic outcome; "
                                "more launches only reveal flakiness"))
            continue
        if isinstance(p, Interaction):
            ref, by_ref = h.factors[p.factor].reference, effective_reference(h, p)
            cells = [_cell(h, {**p.where, p.factor: f, p.by: b})
                     for f, b in [(p.level, p.by_level), (ref, p.by_level), (p.level, by_ref), (ref, by_ref)]]
        else:
            ref = h.factors[p.factor].reference
            cells = [_cell(h, {**p.where, p.factor: p.level}), _cell(h, {**p.where, p.factor: ref})]
        if any(c not in means or not means[c] or means[c] <= 0 for c in cells):
            rows.append(PlanRow(p.id, p.kind, None, None, None, None, None, None,
                                "no assumed metric for a condition it compares"))
            continue
        logs = [math.log(means[c]) for c in cells]
        eff = logs[0] - logs[1] if len(cells) == 2 else logs[0] - logs[1] - logs[2] + logs[3]
        ratio = math.exp(eff)
        if isinstance(p, Equivalent):
            rule, low, high = "equivalent", math.log(1 - p.margin), math.log(1 + p.margin)
            inside, at = low < eff < high, math.isclose(eff, low) or math.isclose(eff, high)
            target = None if at else ("supported" if inside else "refuted")
        elif isinstance(p, Increase) or (isinstance(p, Interaction) and p.direction == "larger"):
            rule, low, high = "up", math.log(1 + p.min_effect), None
            target = None if math.isclose(eff, low) else ("supported" if eff > low else "refuted")
        else:
            assert isinstance(p, (Decrease, Interaction))
            rule, low, high = "down", None, math.log(1 - p.min_effect)
            target = None if math.isclose(eff, high) else ("supported" if eff < high else "refuted")
        if target is None:
            rows.append(PlanRow(p.id, p.kind, ratio, None, None, None, None, None,
                                "assumed effect sits on the threshold: no verdict has power above alpha"))
            continue
        weights = [1.0, -1.0] if len(cells) == 2 else [1.0, -1.0, -1.0, 1.0]
        n, pw = launches_needed(rule, effect_log=eff, var_cells=[var(c) for c in cells], weights=weights, a=alpha,
                                power=power, low=low, high=high, target=target, slow_prob=slow_launch_prob,
                                slow_factor=slow_launch_factor)
        if n is None:
            rows.append(PlanRow(p.id, p.kind, ratio, target, None, None, None, pw,
                                f"power {power} not reachable within {MAX_LAUNCHES} launches per condition"))
            continue
        rows.append(PlanRow(p.id, p.kind, ratio, target, n, n * len(conds), n * per_round, pw,
                            f"power {pw:.3f} to be {target} at {n} launches per condition"))
    return rows


def launches_for_hypothesis(rows: Iterable[PlanRow]) -> int | None:
    """Launches per condition the whole hypothesis needs: the largest of its predictions' (None if any is)."""
    ns = [r.launches_per_condition for r in rows]
    return None if any(n is None for n in ns) else max(ns)  # type: ignore[type-var]


def plan_from_rows(h: Hypothesis, rows: Iterable[dict[str, Any]], *, power: float = 0.9, alpha: float | None = None,
                   requests: int | None = None, warmup: int | None = None,
                   launch_cost_s: float | None = None, request_cost_s: float | None = None) -> list[PlanRow]:
    """Plan from a pilot run's trial rows: its geometric means, variance components and measured costs.

    The between-launch sd is the pooled one (over conditions), the within-launch sd is per condition
    (EAGLE conditions are noisier per request); costs default to the mean start-up time of ok launches
    and, per condition, the span of a launch's workload (first send to last end, model seconds: what a
    concurrent launch takes), or the mean end-to-end time per request where rows carry no send times.
    """
    from framework.analysis import analyze
    from framework.metrics import is_launch_metric

    rows_list = list(rows)
    a = analyze(h, rows_list, alpha=alpha, method="welch")
    pooled = a.details["variance"]["pooled"]
    sd_launch = math.sqrt(pooled["var_between"] or 0.0)
    sd_req: dict[int, float] = {}
    means: dict[int, float] = {}
    for c in a.conditions:
        if c.metric.geometric_mean:
            means[c.index] = c.metric.geometric_mean
        vw = (c.variance or {}).get("var_within")
        sd_req[c.index] = math.sqrt(vw if vw is not None else (pooled["var_within"] or 0.0))
    if is_launch_metric(h.metric):
        # one value per launch (a percentile, a throughput): its whole noise is between launches, and it
        # already holds the pilot's requests per launch; plan at the pilot's requests per launch
        sd_launch = launch_metric_sd(a)
        sd_req = {c.index: 0.0 for c in a.conditions}
    lc = launch_cost_s if launch_cost_s is not None else (a.details["variance"]["launch_cost_s"] or 0.0)
    rc: float | dict[int, float] = (request_cost_s if request_cost_s is not None
                                    else (a.details["variance"]["request_cost_s"] or 0.0))
    if request_cost_s is None:
        # concurrent requests overlap: a launch costs its workload's span, not the sum of its requests
        spans = workload_spans(rows_list)
        n = (h.design.requests if requests is None else requests) + (h.design.warmup if warmup is None else warmup)
        if spans and n > 0:
            rc = {c.index: spans[c.index] / n if c.index in spans else rc for c in a.conditions}  # type: ignore[misc]
    return plan(h, means=means, sd_launch_log=sd_launch, sd_request_log=sd_req, requests=requests, warmup=warmup,
                launch_cost_s=lc, request_cost_s=rc, power=power, alpha=alpha)


def launch_metric_sd(a: Any) -> float:
    """Pooled sd of the log per-launch values over conditions (df-weighted); launch metrics' only noise.

    Raises ValueError when no condition has two launches with a value: a pilot needs at least two.
    """
    num = df = 0
    for c in a.conditions:
        logs = [math.log(v) for v in c.metric.launch_means if v and v > 0]
        if len(logs) >= 2:
            mu = sum(logs) / len(logs)
            num += sum((x - mu) ** 2 for x in logs)
            df += len(logs) - 1
    if df == 0:
        raise ValueError("the pilot has fewer than 2 launches with a value in every condition: "
                         "a launch metric's noise is between launches, so run at least 2 per condition")
    return math.sqrt(num / df)


def workload_spans(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Per condition: the mean span of a launch's workload, first send to last end (model seconds).

    Concurrent requests overlap, so a closed loop of 32 streams lasts about 1/32 of its requests'
    summed latencies; the span is what a launch took (warm-up and cool-down included).
    """
    spans: dict[str, tuple[float, float]] = {}
    cond_of: dict[str, int] = {}
    for r in rows:
        if r.get("kind") != "request" or r.get("start_s") is None or not r.get("e2e_s"):
            continue
        lid = r["launch_id"]
        cond_of[lid] = r.get("condition", -1)
        lo, hi = spans.get(lid, (math.inf, -math.inf))
        spans[lid] = (min(lo, r["start_s"]), max(hi, r["start_s"] + r["e2e_s"]))
    per: dict[int, list[float]] = {}
    for lid, (lo, hi) in spans.items():
        if hi > lo:
            per.setdefault(cond_of[lid], []).append(hi - lo)
    return {c: sum(v) / len(v) for c, v in per.items() if v}
