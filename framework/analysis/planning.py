"""Planning: how many launches per condition each prediction needs, and what that costs in wall time.

Pure functions. Given an assumed true metric per condition, the between-launch sd and the
within-launch (per-request) sd on the log scale, the power of each prediction's decision rule
(docs/statistics.md) is computed for n launches per condition (by simulating the rule's
sufficient statistics, see `power_of`) and the smallest n reaching the target power is reported.
The power is "the probability of the verdict the assumed truth implies":
to be supported when the assumed effect satisfies the prediction, to be refuted when it does not.

A launch's log mean has variance s_L^2 = sd_launch^2 + sd_request_c^2 / requests; the contrast of
a prediction (two cells, or four for an interaction) has variance s_d^2 = sum_c s_L,c^2 / n, and
is judged with the Welch se and Welch-Satterthwaite df as in the analysis. Slow launches and other
heavy tails are not in this model: pad the plan,
or plan from a pilot run (`plan_from_rows`), whose variance components include them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable, Literal

import numpy as np

from framework.core.design import conditions, matching
from framework.core.spec import (
    Decrease,
    Equivalent,
    Hypothesis,
    Increase,
    Interaction,
    Launches,
    Outputs,
    effective_reference,
)
from framework.core.trials import Trials
from framework.stats.agreement import agreement
from framework.stats.anytime import launches_to_support

MAX_LAUNCHES = 1000
ON_THRESHOLD = "assumed effect sits on the threshold: no verdict has power above alpha"


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
    noise, se, q = rule_samples(var_cells=var_cells, weights=weights, n=n, a=a, draws=draws, seed=seed,
                                slow_prob=slow_prob, slow_factor=slow_factor)
    return float(np.mean(hits(rule, effect_log + noise, se, q, low=low, high=high, target=target)))


def rule_samples(*, var_cells: list[float], weights: list[float], n: int, a: float, draws: int = DRAWS,
                 seed: int = 0, slow_prob: float = 0.0,
                 slow_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`power_of`'s simulated experiments at n launches per condition, without the effect: (the estimate's
    error, its Welch se, the t quantile at 1 - a), one per draw. The same draws serve every true effect at this
    n (the noise does not depend on it), so `twin_assurance` judges hundreds of effects on one set. Seeded."""
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
    terms = (w * w) * s2 / n
    se = np.sqrt(terms.sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = terms.sum(axis=1) ** 2 / ((terms ** 2) / (n - 1)).sum(axis=1)
    df = np.where(np.isfinite(df), df, len(v) * (n - 1))
    return means @ w, se, special.stdtrit(df, 1 - a)


def hits(rule: str, est: np.ndarray, se: np.ndarray, q: np.ndarray, *, low: float | None, high: float | None,
         target: str) -> np.ndarray:
    """Whether each simulated experiment's interval gives `target` under the prediction's rule (broadcasts)."""
    lo, hi = est - q * se, est + q * se
    if rule == "up":
        hit = (lo > low) if target == "supported" else (hi < low)
    elif rule == "down":
        hit = (hi < high) if target == "supported" else (lo > high)
    elif rule == "equivalent":
        hit = ((lo > low) & (hi < high)) if target == "supported" else ((hi < low) | (lo > high))
    else:
        raise ValueError(f"unknown rule {rule!r}")
    return hit


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
    return smallest_with_power(pw, lo, max_n, power)


def smallest_with_power(pw: Callable[[int], float], lo: int, hi: int, power: float) -> tuple[int | None, float]:
    """The smallest k in [lo, hi] with pw(k) >= power, for a power that grows with k (a bisection); None and
    the power at `hi` when even `hi` falls short. Launches per condition and machines per fleet both use it."""
    top = pw(hi)
    if top < power:
        return None, top
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


@dataclass(frozen=True)
class Comparison:
    """A comparison prediction as both power models see it: its cells, contrast weights, rule and target."""

    prediction: str
    kind: str
    cells: tuple[int, ...]  # condition indices, in the order of `weights`
    weights: tuple[float, ...]  # (+1, -1) for a ratio, (+1, -1, -1, +1) for an interaction
    effect_log: float  # the assumed log effect (log ratio, or log ratio of ratios)
    rule: Literal["up", "down", "equivalent"]
    low: float | None  # log thresholds of the rule (section 3 of docs/statistics.md)
    high: float | None
    target: Literal["supported", "refuted"] | None  # None: the assumed effect sits on a threshold


OUTPUTS_UNPLANNED = ("an outputs prediction compares generated tokens, not the metric: it has no effect to plan "
                     "machines or a metric for (plan sizes it by its pairs: outputs_row)")


def comparison(h: Hypothesis, p: Any, means: dict[int, float]) -> Comparison | str:
    """The planner's view of a comparison prediction, or why it cannot be planned (a missing metric)."""
    if isinstance(p, Outputs):
        return OUTPUTS_UNPLANNED
    if isinstance(p, Interaction):
        ref, by_ref = h.factors[p.factor].reference, effective_reference(h, p)
        cells = [_cell(h, {**p.where, p.factor: f, p.by: b})
                 for f, b in [(p.level, p.by_level), (ref, p.by_level), (p.level, by_ref), (ref, by_ref)]]
    else:
        ref = h.factors[p.factor].reference
        cells = [_cell(h, {**p.where, p.factor: p.level}), _cell(h, {**p.where, p.factor: ref})]
    if any(c not in means or not means[c] or means[c] <= 0 for c in cells):
        return "no assumed metric for a condition it compares"
    logs = [math.log(means[c]) for c in cells]
    eff = logs[0] - logs[1] if len(cells) == 2 else logs[0] - logs[1] - logs[2] + logs[3]
    target: Literal["supported", "refuted"] | None
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
    weights = (1.0, -1.0) if len(cells) == 2 else (1.0, -1.0, -1.0, 1.0)
    return Comparison(p.id, p.kind, tuple(cells), weights, eff, rule, low, high, target)  # type: ignore[arg-type]


def _launches_row(p: Launches, n_conditions: int, per_round: float) -> PlanRow:
    return PlanRow(p.id, p.kind, None, None, 1, n_conditions, per_round, None,
                   "launch outcomes are counts: one launch decides a deterministic outcome; "
                   "more launches only reveal flakiness")


def outputs_row(p: Outputs, requests: int, alpha: float, n_conditions: int, per_round: float) -> PlanRow:
    """An outputs prediction's row: the launches per condition at which every pair identical would support it.

    Assumes what it claims (every paired request identical). For min_agreement 1.0 that is one launch (one
    difference refutes it at any n); below 1.0 the smallest number of blocks of `requests` identical pairs
    whose Korn-Graubard lower bound reaches the bound (framework.stats.agreement)."""
    if p.min_agreement >= 1.0:
        return PlanRow(p.id, p.kind, None, "supported", 1, n_conditions, per_round, None,
                       "every paired request identical supports it and one difference refutes it, at any number of "
                       "launches; n identical independent requests bound the agreement at >= alpha^(1/n)")
    for m in range(2, MAX_LAUNCHES + 1):
        if agreement([requests] * m, [requests] * m, alpha).lower >= p.min_agreement:
            return PlanRow(p.id, p.kind, None, "supported", m, m * n_conditions, m * per_round, None,
                           f"if every paired request is identical, {m} blocks of {requests} bound the agreement "
                           f"above {p.min_agreement:g} (Korn-Graubard lower bound)")
    return PlanRow(p.id, p.kind, None, None, None, None, None, None,
                   f"{requests} requests per launch cannot bound the agreement above {p.min_agreement:g} within "
                   f"{MAX_LAUNCHES} launches per condition")


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
            rows.append(_launches_row(p, len(conds), per_round))
            continue
        if isinstance(p, Outputs):
            rows.append(outputs_row(p, requests, alpha, len(conds), per_round))
            continue
        comp = comparison(h, p, means)
        if isinstance(comp, str):
            rows.append(PlanRow(p.id, p.kind, None, None, None, None, None, None, comp))
            continue
        ratio, target = math.exp(comp.effect_log), comp.target
        if target is None:
            rows.append(PlanRow(p.id, p.kind, ratio, None, None, None, None, None, ON_THRESHOLD))
            continue
        n, pw = launches_needed(comp.rule, effect_log=comp.effect_log, var_cells=[var(c) for c in comp.cells],
                                weights=list(comp.weights), a=alpha, power=power, low=comp.low, high=comp.high,
                                target=target, slow_prob=slow_launch_prob, slow_factor=slow_launch_factor)
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


# --------------------------------------------------------------------------- the anytime-valid rule

ANYTIME_SIMS = 10000  # joint simulations per anytime plan: MC SE <= 0.005 on any probability, 0.003 at 0.9
_UNDECIDED, _SUPPORTED, _REFUTED = 0, 1, 2


@dataclass(frozen=True)
class AnytimeCurve:
    """What the anytime rule does at each cap (whole blocks), from one joint simulation of the run.

    Index k is the cap `caps[k]` launches per condition, with a look after every block as a
    sequential run makes them: `power[id][k]` is P(that prediction's target verdict at the stop),
    `hypothesis[k]` P(the hypothesis verdict the assumed effects imply), `launches[k]` the mean
    launches per condition at the stop (its MC SE in `launches_se`).
    """

    caps: list[int]
    power: dict[str, list[float]]
    hypothesis: list[float] | None
    hypothesis_target: str | None
    launches: list[float]
    launches_se: list[float]
    sims: int

    def at(self, cap: int) -> int:
        """Index of the largest simulated cap <= `cap` (past the last, the paths had all stopped)."""
        return max(0, sum(1 for c in self.caps if c <= cap) - 1)

    def smallest(self, power: float, ids: Iterable[str] | None = None) -> int | None:
        """The smallest cap whose hypothesis power (or, with `ids`, those predictions' powers) is >= `power`."""
        curves = [self.power[i] for i in ids] if ids is not None else [self.hypothesis or []]
        for k, cap in enumerate(self.caps):
            if curves and all(len(c) > k and c[k] >= power for c in curves):
                return cap
        return None


def _verdict_codes(lo: np.ndarray, hi: np.ndarray, comp: Comparison) -> np.ndarray:
    """Section 3's rule on confidence-sequence bounds, in `stats.decisions`' order (supported first)."""
    if comp.rule == "up":
        sup, ref = lo > comp.low, hi < comp.low
    elif comp.rule == "down":
        sup, ref = hi < comp.high, lo > comp.high
    else:
        sup, ref = (lo > comp.low) & (hi < comp.high), (hi < comp.low) | (lo > comp.high)
    return np.where(sup, _SUPPORTED, np.where(ref, _REFUTED, _UNDECIDED))


def simulate_anytime(comps: list[Comparison], var_cells: dict[int, float], *, alpha: float, comparisons: int,
                     block: int, max_launches: int, sims: int = ANYTIME_SIMS, seed: int = 0,
                     slow_prob: float = 0.0, slow_factor: float = 1.0,
                     until_power: float | None = None, at_least: int = 0,
                     noise: np.ndarray | None = None, launch_rules: dict[str, int] | None = None) -> AnytimeCurve:
    """Simulate runs under `design.analysis: anytime` with a look after every block, jointly for all comparisons.

    Why joint: the run stops when every prediction is decided, so the predictions' stopping times
    and the hypothesis verdict depend on each other through the shared conditions. Each launch's log
    mean is normal with variance `var_cells[c]` (plus, with probability `slow_prob`, a slow launch
    shifting it by log `slow_factor`); each block's contrasts are formed as the analysis forms them,
    and the bounds are `stats.anytime`'s running intersections of the t e-process's confidence
    sequences (its `critical_t`), at `alpha` for the predictions and `alpha / comparisons` for the
    hypothesis-level refutation (docs/statistics.md sections 8 and 10). Mirrors
    `analysis.sequential_look`: at each look every prediction is decided at the full alpha and the
    run stops when none is inconclusive, or at the cap. Launch-outcome predictions (`launch_rules`:
    id -> launches per condition from which their e-process supports them, `launch_decided_at`) are
    assumed to have the expected outcome at every launch: undecided before that, supported from the
    first look at or past it; they never refute. Stops simulating at `max_launches`, when every path has
    stopped, or once the hypothesis and every prediction with a target reach `until_power` (not
    before `at_least` launches). `noise` (sims x launches x cells, in sorted cell order) replaces the
    draws: the same data the analysis sees, to check that this mirrors it.
    Seeded, vectorised over simulations; a few seconds at 10000 simulations and 100 launches.
    """
    from framework.stats.anytime import critical_t

    cells = sorted({c for comp in comps for c in comp.cells})
    w = np.zeros((len(comps), len(cells)))
    for i, comp in enumerate(comps):
        for c, x in zip(comp.cells, comp.weights, strict=False):
            w[i, cells.index(c)] += x
    sd = np.sqrt([var_cells[c] for c in cells])
    effect = np.array([comp.effect_log for comp in comps])
    launch_rules = launch_rules or {}
    targets = [comp.target for comp in comps] + ["supported"] * len(launch_rules)
    hyp_target = (None if not targets or any(t is None for t in targets)
                  else "supported" if all(t == "supported" for t in targets) else "refuted")
    a_refute = alpha / max(1, comparisons)
    rng = np.random.default_rng([seed, sims])
    shape = (sims, len(comps))
    s1, s2 = np.zeros(shape), np.zeros(shape)
    lo, hi, lo_r, hi_r = (np.full(shape, v) for v in (-np.inf, np.inf, -np.inf, np.inf))
    ids = [comp.prediction for comp in comps] + list(launch_rules)
    frozen = np.zeros((sims, len(ids)), dtype=np.int8)  # verdicts at the stop of paths that stopped
    frozen_refuted = np.zeros(sims, dtype=bool)  # hypothesis refuted at their stop
    stopped_at = np.zeros(sims, dtype=int)  # 0: not stopped yet
    curve: dict[str, Any] = {"caps": [], "power": {i: [] for i in ids}, "hypothesis": [],
                             "launches": [], "launches_se": []}
    for n in range(1, max_launches + 1):
        if noise is not None:
            x = noise[:, n - 1, :]
        else:
            x = rng.standard_normal((sims, len(cells))) * sd
        if noise is None and slow_prob > 0 and slow_factor != 1.0:
            x += math.log(slow_factor) * (rng.random((sims, len(cells))) < slow_prob)
        c = effect + x @ w.T
        s1 += c
        s2 += c * c
        if n >= 2:
            mean = s1 / n
            s = np.sqrt(np.maximum((s2 - n * mean * mean) / (n - 1), 0.0))
            spread = s > 0  # no spread seen: no evidence at this n (stats.anytime)
            for a, low_b, high_b in ((alpha, lo, hi), (a_refute, lo_r, hi_r)):
                half = critical_t(n, float(a)) * s / math.sqrt(n)
                with np.errstate(invalid="ignore"):
                    np.maximum(low_b, np.where(spread, mean - half, -np.inf), out=low_b)
                    np.minimum(high_b, np.where(spread, mean + half, np.inf), out=high_b)
        if n % block and n != max_launches:
            continue
        v = np.stack([_verdict_codes(lo[:, i], hi[:, i], comp) for i, comp in enumerate(comps)]
                     + [np.full(sims, _SUPPORTED if n >= at else _UNDECIDED, dtype=np.int64)
                        for at in launch_rules.values()], axis=1)
        refuted = v[:, :len(comps)] == _REFUTED
        if comparisons > 1 and comps:
            again = np.stack([_verdict_codes(lo_r[:, i], hi_r[:, i], comp) for i, comp in enumerate(comps)], axis=1)
            refuted &= again == _REFUTED
        hyp_refuted = refuted.any(axis=1)
        active = stopped_at == 0
        at_stop = np.where(active[:, None], v, frozen)
        refuted_at_stop = np.where(active, hyp_refuted, frozen_refuted)
        launches = np.where(active, n, stopped_at)
        curve["caps"].append(n)
        for i, (pid, target) in enumerate(zip(ids, targets, strict=False)):
            code = _SUPPORTED if target == "supported" else _REFUTED
            curve["power"][pid].append(float(np.mean(at_stop[:, i] == code)) if target else math.nan)
        if hyp_target == "supported":
            curve["hypothesis"].append(float(np.mean((at_stop == _SUPPORTED).all(axis=1))))
        elif hyp_target == "refuted":
            curve["hypothesis"].append(float(np.mean(refuted_at_stop)))
        curve["launches"].append(float(launches.mean()))
        curve["launches_se"].append(float(launches.std(ddof=1) / math.sqrt(sims)) if sims > 1 else math.nan)
        newly = active & (v != _UNDECIDED).all(axis=1)
        frozen[newly], frozen_refuted[newly], stopped_at[newly] = v[newly], hyp_refuted[newly], n
        reached = until_power is not None and all(
            p[-1] >= until_power for target, p in zip(targets, curve["power"].values(), strict=False) if target) and (
            hyp_target is None or curve["hypothesis"][-1] >= until_power)
        if not (stopped_at == 0).any() or (reached and n >= at_least):
            break
    return AnytimeCurve(curve["caps"], curve["power"], curve["hypothesis"] if hyp_target else None, hyp_target,
                        curve["launches"], curve["launches_se"], sims)


def launch_decided_at(h: Hypothesis, p: Launches, alpha: float) -> int:
    """Launches per condition from which the anytime rule supports `p` when every launch has the expected outcome.

    Why: plan takes the assumed truth, and for a launch-outcome prediction that is the outcome it
    expects, every time. Its e-process (section 10) looks at the end of every replicate, when
    each of the `matched` conditions has one more launch; with all n launches as expected E_n
    grows with n, so it first reaches 1/alpha at `launches_to_support(rate, alpha)` launches, i.e.
    after ceil(that / matched) launches per condition.
    """
    matched = len(matching(conditions(h), p.where))
    return math.ceil(launches_to_support(p.rate, alpha) / max(1, matched))


def anytime_launch_floor(h: Hypothesis, block: int, alpha: float) -> int:
    """The fewest launches per condition, in whole blocks, at which every launch-outcome prediction of `h`
    can be supported under the anytime rule (0 without one): a default cap below it could never support
    them, whatever happened (a `rate: 0.9` claim needs 43 launches)."""
    need = [launch_decided_at(h, p, alpha) for p in h.predictions if isinstance(p, Launches)]
    return block * math.ceil(max(need) / block) if need else 0


@dataclass(frozen=True)
class AnytimePlan:
    """The plan under `design.analysis: anytime`: the smallest cap with the target power, and what it costs."""

    block: int
    power: float  # the target
    cap: int | None  # launches per condition (whole blocks); None: not reachable within MAX_LAUNCHES
    rows: list[PlanRow]  # per prediction: the smallest cap it alone needs, and its power there
    power_at_cap: dict[str, float]  # per prediction, at `cap`
    hypothesis_target: str | None
    hypothesis_power: float | None  # at `cap`
    expected_launches: float | None  # per condition at the stop, with a look after every block
    expected_launches_se: float | None
    expected_wall_s: float | None  # expected launches times a round of every condition
    max_wall_s: float | None  # the cap reached
    sims: int
    curve: AnytimeCurve | None
    note: str = ""


def plan_anytime(h: Hypothesis, *, means: dict[int, float], sd_launch_log: float | dict[int, float],
                 sd_request_log: float | dict[int, float], requests: int | None = None, warmup: int | None = None,
                 launch_cost_s: float | dict[int, float] = 0.0, request_cost_s: float | dict[int, float] = 0.0,
                 power: float = 0.9, alpha: float | None = None, block: int | None = None,
                 slow_launch_prob: float = 0.0, slow_launch_factor: float = 1.0, sims: int = ANYTIME_SIMS,
                 seed: int = 0, at_least: int = 0) -> AnytimePlan:
    """The smallest cap, in whole blocks, at which the anytime rule gives the hypothesis's verdict with `power`.

    Same assumptions as `plan` (its keyword arguments), judged with the anytime rule instead of
    Welch's: `simulate_anytime` on every comparison jointly, looks after every `block`
    (`design.sequential.block`). The cap is the smallest with P(the hypothesis verdict the assumed
    effects imply) >= `power`; where that verdict is undefined (an effect on a threshold), the
    smallest at which every prediction with a target reaches it. `at_least`: simulate at least that
    far (to read a design's own cap off `curve`).
    """
    alpha = h.design.alpha if alpha is None else float(alpha)
    requests = h.design.requests if requests is None else int(requests)
    warmup = h.design.warmup if warmup is None else int(warmup)
    block = h.design.sequential.block if block is None else int(block)
    conds = conditions(h)
    per_round = sum(_per(launch_cost_s, c.index) + (requests + warmup) * _per(request_cost_s, c.index) for c in conds)
    var = {c.index: _per(sd_launch_log, c.index) ** 2 + _per(sd_request_log, c.index) ** 2 / requests for c in conds}
    comps: list[Comparison] = []
    notes: dict[str, PlanRow] = {}
    launch_rules: dict[str, int] = {}
    for p in h.predictions:
        if isinstance(p, Launches):
            launch_rules[p.id] = launch_decided_at(h, p, alpha)
            continue
        if isinstance(p, Outputs):  # not a metric: decided by its pairs, not by the simulated effects
            notes[p.id] = outputs_row(p, requests, alpha, len(conds), per_round)
            continue
        comp = comparison(h, p, means)
        if isinstance(comp, str):
            notes[p.id] = PlanRow(p.id, p.kind, None, None, None, None, None, None, comp)
        else:
            comps.append(comp)
            if comp.target is None:
                notes[p.id] = PlanRow(p.id, p.kind, math.exp(comp.effect_log), None, None, None, None, None,
                                      ON_THRESHOLD)
    missing = [r.prediction for r in notes.values() if r.kind not in ("launches", "outputs") and r.note != ON_THRESHOLD]
    m = len(h.predictions)  # the analysis's m under anytime: launch outcomes are tests too (section 8)
    curve = None
    if comps or launch_rules:
        curve = simulate_anytime(comps, var, alpha=alpha, comparisons=m, block=block,
                                 max_launches=block * (MAX_LAUNCHES // block), sims=sims, seed=seed,
                                 slow_prob=slow_launch_prob, slow_factor=slow_launch_factor, until_power=power,
                                 at_least=at_least, launch_rules=launch_rules)
    with_target = [c.prediction for c in comps if c.target] + list(launch_rules)
    whole = curve is not None and curve.hypothesis_target is not None and not missing  # the hypothesis is judged
    cap = None
    if curve is not None:
        cap = curve.smallest(power) if whole else curve.smallest(power, with_target)
    rows: list[PlanRow] = []
    for p in h.predictions:
        if p.id in notes:
            rows.append(notes[p.id])
            continue
        assert curve is not None
        own = curve.smallest(power, [p.id])
        k = curve.at(own) if own else len(curve.caps) - 1
        pw = curve.power[p.id][k]
        if isinstance(p, Launches):
            need = launches_to_support(p.rate, alpha)
            matched = len(matching(conds, p.where))
            rows.append(PlanRow(p.id, p.kind, None, "supported", own, own * len(conds) if own else None,
                                own * per_round if own else None, pw,
                                f"assuming every launch has the expected outcome ({p.expect}): its e-process "
                                f"supports rate > {p.rate:g} after {need} such launches over its {matched} "
                                f"condition(s), {launch_rules[p.id]} per condition, so from a cap of {own}"))
            continue
        comp = next(c for c in comps if c.prediction == p.id)
        note = (f"power {pw:.3f} to be {comp.target} by a cap of {own} launches per condition" if own else
                f"power {power} not reachable within {MAX_LAUNCHES} launches per condition")
        rows.append(PlanRow(p.id, p.kind, math.exp(comp.effect_log), comp.target, own,
                            own * len(conds) if own else None, own * per_round if own else None, pw, note))
    if curve is None:
        return AnytimePlan(block, power, None, rows, {}, None, None, None, None, None, None, sims, None,
                           "no comparison prediction to plan")
    k = curve.at(cap) if cap else len(curve.caps) - 1
    shown = cap or curve.caps[-1]
    note = "" if cap else f"power {power} not reachable within {MAX_LAUNCHES} launches per condition"
    if missing:
        note = (note + "; " if note else "") + (f"without an assumed metric for {', '.join(missing)}: the cap and "
                                                f"the stopping time leave it out, so read them as lower bounds")
    return AnytimePlan(
        block=block, power=power, cap=cap, rows=rows,
        power_at_cap={i: curve.power[i][k] for i in with_target},
        hypothesis_target=curve.hypothesis_target if whole else None,
        hypothesis_power=curve.hypothesis[k] if whole and curve.hypothesis else None,
        expected_launches=curve.launches[k], expected_launches_se=curve.launches_se[k],
        expected_wall_s=curve.launches[k] * per_round, max_wall_s=shown * per_round, sims=sims, curve=curve,
        note=note)


@lru_cache(maxsize=256)
def anytime_cap(fixed_launches: int, block: int, alpha: float, power: float = 0.9) -> int:
    """The default cap of a sequential run under `analysis: anytime`: the anytime equivalent of the fixed design.

    Why: `design.launches` is what `plan` gives a fixed design for `power`; the group-sequential cap
    (`stats.sequential.sequential_cap`) keeps that power under alpha spending, but the anytime rule
    pays more for its freedom (critical t of 5.1 at 5 blocks, 3.1 at 20), so the same cap would
    lose power. The cap is the smallest whole number of blocks at which the anytime rule, looking
    after every block, has `power` for the effect the fixed design of `fixed_launches` has it for:
    a two-condition ratio whose standardized drift is d_f = z_{1-alpha} + z_power (as in
    `sequential_cap`), i.e. a block contrast of mean d_f / sqrt(fixed_launches) contrast sds
    (the fixed design's se is sqrt(2 / n) launch sds, the contrast's sd sqrt(2)). Simulated by
    `simulate_anytime` with 10000 seeded paths: deterministic, MC SE about 0.003 on the power.
    """
    from scipy import stats

    if fixed_launches < 1 or block < 1:
        raise ValueError("fixed_launches and block must be >= 1")
    drift = float(stats.norm.isf(alpha) + stats.norm.ppf(power))
    comp = Comparison("fixed-equivalent", "increase", (0,), (1.0,), drift / math.sqrt(fixed_launches), "up", 0.0,
                      None, "supported")
    top = block * (MAX_LAUNCHES // block)
    curve = simulate_anytime([comp], {0: 1.0}, alpha=float(alpha), comparisons=1, block=block, max_launches=top,
                             until_power=power)
    cap = curve.smallest(power)
    return max(cap or top, block * math.ceil(fixed_launches / block))


def plan_from_rows(h: Hypothesis, rows: Iterable[dict[str, Any]], *, power: float = 0.9, alpha: float | None = None,
                   requests: int | None = None, warmup: int | None = None,
                   launch_cost_s: float | None = None, request_cost_s: float | None = None) -> list[PlanRow]:
    """Plan from a pilot run's trial rows: its geometric means, variance components and measured costs."""
    return plan(h, **pilot_assumptions(h, rows, alpha=alpha, requests=requests, warmup=warmup,
                                       launch_cost_s=launch_cost_s, request_cost_s=request_cost_s),
                requests=requests, warmup=warmup, power=power, alpha=alpha)


def pilot_assumptions(h: Hypothesis, rows: Iterable[dict[str, Any]], *, alpha: float | None = None,
                      requests: int | None = None, warmup: int | None = None, launch_cost_s: float | None = None,
                      request_cost_s: float | None = None) -> dict[str, Any]:
    """A pilot run's means, sds and costs, as the keyword arguments of `plan` and `plan_anytime`.

    The between-launch sd is the pooled one (over conditions), the within-launch sd is per condition
    (EAGLE conditions are noisier per request); costs default to the mean start-up time of ok launches
    and, per condition, the span of a launch's workload (first send to last end, model seconds: what a
    concurrent launch takes), or the mean end-to-end time per request where rows carry no send times.
    """
    from framework.analysis.verdicts import analyze
    from framework.core.metrics import is_launch_metric

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
    return {"means": means, "sd_launch_log": sd_launch, "sd_request_log": sd_req, "launch_cost_s": lc,
            "request_cost_s": rc}


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
    for r in Trials.of(rows).of_kind("request"):
        if r.get("start_s") is None or not r.get("e2e_s"):
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


MODE_SHARES = (0.10, 0.05, 0.03, 0.01)  # the shares `plan` lists: fixed, round numbers
MODE_CONFIDENCE = 0.95


def launches_to_see_mode(share: float, confidence: float = MODE_CONFIDENCE) -> int:
    """Launches a condition needs to show a launch mode of this share at least once with this probability.

    P(seen in n) = 1 - (1 - p)^n >= confidence  <=>  n >= log(1 - confidence) / log(1 - p).
    Why: under the mean estimand a mode none of the launches showed moves the ratio unseen.
    """
    if not 0 < share < 1:
        raise ValueError(f"a mode's share is in (0, 1) (got {share})")
    return math.ceil(math.log(1 - confidence) / math.log(1 - share) - 1e-12)


def mode_shares(assumed: float = 0.0) -> list[tuple[float, int]]:
    """(share, launches to see it with probability 0.95) for the listed shares and an assumed mode's share."""
    shares = sorted({*MODE_SHARES, *([assumed] if 0 < assumed < 1 else [])}, reverse=True)
    return [(p, launches_to_see_mode(p)) for p in shares]

