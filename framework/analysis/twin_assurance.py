"""Plan with a twin's uncertainty: the launches a hypothesis needs when the twin's parameters are uncertain.

`plan` with a twin (`backend=sim sim_profile=TWIN`) used to take the twin's point predictions as the truth.
A fitted parameter is known to its standard error only, and a twin's equations miss what its residual says
they miss, so the truth behind a borderline prediction can sit on either side of its threshold. This module
propagates both into the plan (docs/statistics.md, "Planning with a twin's uncertainty"):

1. draws: `DRAWS` parameter vectors from the fit's normal approximation N(estimate, covariance) (the same
   covariance `predict_interval` uses), each clipped to the parameter's physical range; every condition's
   launch mean at each draw (the twin's equations), times exp(N(0, misfit^2)) per condition, misfit^2 = what
   the residual variance holds beyond launch and request noise. `condition_draws` does that.
2. per draw, the prediction's true effect and the verdict it implies (supported / refuted), and the power
   of the analysis's Welch rule at n launches: the same simulated experiments (`planning.rule_samples`)
   judge every draw's effect at one n.
3. the plan: the smallest n at which `power` of the draws have power >= `power` for the verdict each implies
   (a quantile of the launches each draw needs), and at that n the assurance -- the probability, averaged
   over the draws, of reaching the verdict the truth implies (O'Hagan & Stevens 2001, "expected power") --
   and the probabilities of supported, refuted and inconclusive.

A prediction whose metric moves with a parameter the pilot did not identify cannot be propagated: its row
says which parameter, and no launches. Pure (no I/O, seeded draws): the shell passes the twin's predict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from framework.analysis.planning import MAX_LAUNCHES, Comparison, comparison, hits, rule_samples
from framework.core.design import conditions
from framework.core.spec import Hypothesis, Launches
from framework.core.twin import POSITIVE, RANGES, TwinConfig, TwinFit

DRAWS = 200  # parameter draws: the share of draws past a threshold has MC SE <= 0.035
RULE_DRAWS = 4000  # simulated experiments per n (one set for every draw): MC SE about 0.005 at power 0.9
SEED = 20261202  # fixed before any plan was looked at
# n evaluated for every draw: each up to 20, then coarser; the answer is refined to the exact n in its gap
GRID = sorted({*range(2, 21), *range(22, 51, 2), *range(55, 101, 5), *range(110, 201, 10), *range(225, 501, 25),
               *range(550, MAX_LAUNCHES + 1, 50)})

Predict = Callable[[TwinFit, TwinConfig], dict[str, float]]


@dataclass(frozen=True)
class AssuranceRow:
    """One prediction's plan under the twin's uncertainty."""

    prediction: str
    kind: str
    implied: dict[str, float]  # share of draws whose true effect implies "supported" / "refuted"
    launches_per_condition: int | None  # n: `power` of the draws have power >= `power` (None: cannot, see note)
    assurance: float | None  # at n: P(the verdict the truth implies), averaged over the draws
    verdicts: dict[str, float] = field(default_factory=dict)  # at n: P(supported), P(refuted), P(inconclusive)
    draw_launches: dict[str, int | None] = field(default_factory=dict)  # quantiles of the launches each draw needs
    note: str = ""


# --------------------------------------------------------------------------- draws of the twin


def parameter_draws(fit: TwinFit, draws: int = DRAWS, seed: int = SEED) -> list[dict[str, float]]:
    """`draws` values of the identified parameters from N(estimate, covariance), clipped to their ranges
    (a step cost stays >= 0, every request's own costs > 0). Unidentified parameters are not drawn."""
    free = [n for n, p in fit.parameters.items() if p.identifiable and p.estimate is not None]
    if not free:
        return [{} for _ in range(draws)]
    mean = np.asarray([fit.value(n) for n in free])
    cov = np.asarray([[fit.covariance.get(a, {}).get(b, 0.0) for b in free] for a in free])
    cov = np.where(np.isfinite(cov), cov, 0.0)
    cov = (cov + cov.T) / 2
    rng = np.random.default_rng(seed)
    # an eigen-decomposition, not Cholesky: a covariance from pinv can be singular (a parameter at its bound)
    vals, vecs = np.linalg.eigh(cov)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    x = mean + rng.standard_normal((draws, len(free))) @ root.T
    out = []
    for row in x:
        d = {}
        for name, v in zip(free, row, strict=True):
            lo, hi = RANGES[name]
            v = min(max(float(v), lo), hi)
            if name in POSITIVE and v <= 0:
                v = max(fit.value(name) * 1e-3, 1e-6)
            d[name] = v
        out.append(d)
    return out


def misfit_log_sd(fit: TwinFit, metric: str, requests: int) -> float:
    """The sd (log scale) by which a condition's true mean can sit off the twin's equations: the residual
    variance of the fit's launch means beyond the launch and request noise it also holds (0 where the pilot
    ran one launch per configuration and its residual stands in for the launch noise)."""
    key = "ttft_s" if metric == "ttft_s" else "tpot_s"
    nz = fit.noise.get(key)
    if nz is None or nz.launch_log_sd is None:
        return 0.0
    per_request = (nz.request_log_sd or 0.0) ** 2 / max(1, nz.requests // max(1, nz.launches))
    return math.sqrt(max(0.0, nz.residual_log_sd ** 2 - nz.launch_log_sd ** 2 - per_request))


def _log_gradient(fit: TwinFit, config: TwinConfig, metric: str, predict: Predict,
                  names: list[str]) -> tuple[float, dict[str, float]]:
    """log of the twin's mean of `metric` at `config` and its derivative in each parameter (forward differences,
    the steps `predict_interval` takes)."""
    base = predict(fit, config).get(metric)
    if not isinstance(base, (int, float)) or not (base > 0 and math.isfinite(base)):
        return math.nan, {}
    grad = {}
    for n in names:
        v = fit.value(n)
        h = max(abs(v) * 1e-4, 1e-6 if n in ("thread_exponent", "accept_length") else 1e-3)
        moved = predict(fit.with_values({n: v + h}), config).get(metric)
        grad[n] = (math.log(moved) - math.log(base)) / h if moved and moved > 0 else 0.0
    return math.log(base), grad


def condition_draws(conditions: dict[int, tuple[str, TwinFit, TwinConfig]], metric: str, predict: Predict, *,
                    draws: int = DRAWS, seed: int = SEED, requests: int = 1,
                    blocked: dict[int, list[str]] | None = None, exact: bool = False,
                    progress: Callable[[int, int], None] | None = None) -> list[dict[int, float]]:
    """Per draw, every condition's true launch mean of `metric`: condition index -> (the twin's key, its fit,
    the condition's configuration). Conditions of one twin share its parameter draw (a comparison within one
    twin moves with it); twins are drawn independently; each condition adds its own misfit. A condition in
    `blocked` (its metric needs an unidentified parameter) is left out of every draw.

    By default the log mean moves linearly in the drawn parameters (the gradient `predict_interval`'s delta
    method uses: 1 + p replays of the twin per condition, so `plan` stays within seconds); `exact` replays the
    twin at every draw (DRAWS replays per condition; the tests check the two agree)."""
    blocked = blocked or {}
    fits = {key: fit for key, fit, _ in conditions.values()}
    params = {key: parameter_draws(fit, draws, seed=seed + i) for i, (key, fit) in enumerate(sorted(fits.items()))}
    rng = np.random.default_rng([seed, 1])
    shift = {c: rng.standard_normal(draws) * misfit_log_sd(fit, metric, requests)
             for c, (_, fit, _) in sorted(conditions.items())}
    linear: dict[int, tuple[float, dict[str, float]]] = {}
    if not exact:
        for i, (c, (key, fit, config)) in enumerate(sorted(conditions.items())):
            if c not in blocked:
                linear[c] = _log_gradient(fit, config, metric, predict, sorted(params[key][0]))
            if progress is not None:
                progress(i + 1, len(conditions))
    out: list[dict[int, float]] = []
    for k in range(draws):
        means: dict[int, float] = {}
        for c, (key, fit, config) in sorted(conditions.items()):
            if c in blocked:
                continue
            if exact:
                value = predict(fit.with_values(params[key][k]), config).get(metric)
            else:
                base, grad = linear[c]
                value = math.exp(base + sum(g * (params[key][k][n] - fit.value(n)) for n, g in grad.items()))
            if isinstance(value, (int, float)) and value > 0 and math.isfinite(value):
                means[c] = float(value) * math.exp(float(shift[c][k]))
        out.append(means)
        if progress is not None and exact:
            progress(k + 1, draws)
    return out


# --------------------------------------------------------------------------- the plan


def _quantile(ns: list[float], q: float) -> float:
    """The q-quantile of per-draw launches (inf: a draw no n reaches), the smallest value with share >= q."""
    s = sorted(ns)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _powers(comp: Comparison, effects: np.ndarray, targets: np.ndarray, var: list[float], n: int,
            alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per draw at n launches per condition: P(supported), P(refuted), P(the verdict the draw implies)."""
    noise, se, q = rule_samples(var_cells=var, weights=list(comp.weights), n=n, a=alpha, draws=RULE_DRAWS, seed=0)
    est = effects[:, None] + noise[None, :]
    sup = hits(comp.rule, est, se, q, low=comp.low, high=comp.high, target="supported").mean(axis=1)
    ref = hits(comp.rule, est, se, q, low=comp.low, high=comp.high, target="refuted").mean(axis=1)
    return sup, ref, np.where(targets == "supported", sup, np.where(targets == "refuted", ref, 0.0))


def assurance(h: Hypothesis, draws: list[dict[int, float]], *, sd_launch_log: float | dict[int, float],
              sd_request_log: float | dict[int, float], requests: int, power: float = 0.9, alpha: float,
              blocked: dict[int, list[str]] | None = None) -> list[AssuranceRow]:
    """Each comparison prediction's launches under the twin's uncertainty (the module's steps 2 and 3)."""
    blocked = blocked or {}

    def per(value: float | dict[int, float], c: int) -> float:
        return float(value[c]) if isinstance(value, dict) else float(value)

    rows: list[AssuranceRow] = []
    for p in h.predictions:
        if isinstance(p, Launches):
            continue
        shape = comparison(h, p, {c.index: 1.0 for c in conditions(h)})  # its cells, whatever the means
        cells = shape.cells if not isinstance(shape, str) else ()
        needs = sorted({n for c in cells for n in blocked.get(c, [])})
        comps = [] if needs else [comparison(h, p, d) for d in draws]
        first = next((c for c in comps if not isinstance(c, str)), None)
        if first is None or needs or any(isinstance(c, str) for c in comps):
            why = (f"cannot propagate: its conditions' {h.metric} needs {', '.join(needs)}, which the pilot did not "
                   "identify" if needs else "cannot propagate: no twin mean for a condition it compares")
            rows.append(AssuranceRow(p.id, p.kind, {}, None, None, note=why))
            continue
        effects = np.asarray([c.effect_log for c in comps if not isinstance(c, str)])
        targets = np.asarray([c.target or "none" for c in comps if not isinstance(c, str)])
        implied = {t: float(np.mean(targets == t)) for t in ("supported", "refuted")}
        var = [per(sd_launch_log, c) ** 2 + per(sd_request_log, c) ** 2 / requests for c in first.cells]

        def powers(n: int, first: Comparison = first, effects: np.ndarray = effects, targets: np.ndarray = targets,
                   var: list[float] = var) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _powers(first, effects, targets, var, n, alpha)

        need = np.full(len(effects), math.inf)
        at: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for n in GRID:
            at[n] = powers(n)
            new = (at[n][2] >= power) & ~np.isfinite(need)
            need[new] = n
            if _quantile(list(need), power) < math.inf:
                break
        q_grid = _quantile(list(need), power)
        quants = {f"q{int(qq * 100)}": (None if (v := _quantile(list(need), qq)) == math.inf else int(v))
                  for qq in (0.5, 0.9)}
        if q_grid == math.inf:
            close = float(np.mean(np.isinf(need)))
            rows.append(AssuranceRow(
                p.id, p.kind, implied, None, None, draw_launches=quants,
                note=(f"cannot reach power {power} in {power:.0%} of the twin's draws within {MAX_LAUNCHES} launches: "
                      f"{close:.0%} of its draws put the effect too near a threshold (the twin cannot tell the "
                      "verdict); a pilot on the deployment itself decides it")))
            continue
        # refine: the exact n in the grid's gap below q_grid (power grows with n for a given effect)
        below = max([g for g in GRID if g < q_grid], default=1)
        n_final = int(q_grid)
        for n in range(below + 1, int(q_grid)):
            trial = powers(n)
            if float(np.mean(trial[2] >= power)) >= power:
                n_final, at[n] = n, trial
                break
        sup, ref, right = at[n_final]
        verdicts = {"supported": float(sup.mean()), "refuted": float(ref.mean()),
                    "inconclusive": float(1 - sup.mean() - ref.mean())}
        rows.append(AssuranceRow(p.id, p.kind, implied, n_final, float(right.mean()), verdicts, quants,
                                 note=(f"power {power} for the verdict each draw implies in {power:.0%} of the twin's "
                                       f"draws at {n_final} launches per condition")))
    return rows


def launches_for_hypothesis(rows: Iterable[AssuranceRow]) -> int | None:
    """The launches per condition the whole hypothesis needs under the twin's uncertainty (None: cannot)."""
    ns = [r.launches_per_condition for r in rows]
    return None if not ns or any(n is None for n in ns) else max(n for n in ns if n is not None)


def summary(rows: list[AssuranceRow]) -> list[dict[str, Any]]:
    """The rows as plain data (records, JSON)."""
    return [r.__dict__ for r in rows]
