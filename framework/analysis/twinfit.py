"""Fit a twin's parameters to a pilot's launches, and predict other configurations with an interval.

Pure: trial rows and a model in, a :class:`framework.core.twin.TwinFit` out. The model's equations
are the sim's (reached through the backend table's adapter, so this room never imports a server): the
caller passes ``predict(fit, config) -> {metric: launch mean}``.

Method (docs/model.md, "Fitting a twin"): the launch means of ``ttft_s`` and ``tpot_s`` (and the
accept length with speculative decoding) on the log scale, by nonlinear least squares
(``scipy.optimize.least_squares``), weighted by each metric's residual sd (two passes). A parameter
is identifiable when its column of the Jacobian adds rank to those before it (in the order of
``PARAMETERS``); the others are reported as not identifiable with what the pilot must vary, and
their effect is left out (a prediction that depends on one says so instead of giving an interval).
The covariance is ``s^2 (J'J)^-1``. Launch and request noise are the one-way ANOVA components of the
log request values about their launch's and condition's means (docs/statistics.md, section 6).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from framework.core.trials import Trials
from framework.core.twin import (
    FITTED_METRICS,
    MAX_STEP_US,
    MAX_TP_SIZE,
    PARAMETERS,
    RANGES,
    FlagNoise,
    MetricNoise,
    Parameter,
    TwinConfig,
    TwinFit,
    blank,
    domain_of,
    extrapolation,
)
from framework.errors import FitError

Predict = Callable[[TwinFit, TwinConfig], dict[str, float]]
LOWER = {"thread_exponent": -2.0, "accept_length": 1.0}
UPPER = {"thread_exponent": 3.0, "accept_length": 16.0}
RANK_TOL = 1e-6


@dataclass(frozen=True)
class Launch:
    """One pilot launch: its configuration and the measured requests' values."""

    launch_id: str
    condition: str  # a key of the condition (its levels), for the noise components
    config: TwinConfig
    values: dict[str, list[float]] = field(default_factory=dict)  # metric -> measured requests' values
    accept: list[float] = field(default_factory=list)

    def mean(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return sum(v) / len(v) if v else None


# --------------------------------------------------------------------------- rows -> launches


def _engine_flags(argv: list[str]) -> list[str]:
    """A launch's argv after the program (``python -m MODULE`` or the binary), without the template's own flags."""
    start = argv.index("-m") + 2 if "-m" in argv[:3] else 1
    own = {"--model", "--model-path", "--host", "--port", "--seed", "--random-seed", "--tp-size",
           "--tensor-parallel-size", "--interrupt_requests", "--api-key"}
    out: list[str] = []
    rest = argv[start:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        name = tok.partition("=")[0]
        if name in own or name.startswith("--sim-"):
            i += 1 if "=" in tok else 2
            continue
        out.append(tok)
        i += 1
    return out


def _tp(argv: list[str]) -> int:
    for flag in ("--tp-size", "--tensor-parallel-size", "-tp"):
        if flag in argv:
            try:
                return int(argv[argv.index(flag) + 1])
            except (IndexError, ValueError):
                return 1
    return 1


def launches_from_rows(rows: Iterable[dict[str, Any]], engine: str) -> list[Launch]:
    """The pilot's measured launches (a started launch with a closed-loop workload and measured requests)."""
    trials = Trials.of(rows)
    argv = {r["launch_id"]: list(r.get("argv") or []) for r in trials.of_kind("launch") if r.get("ok")}
    work = {r["launch_id"]: r for r in trials.of_kind("workload")}
    reqs: dict[str, list[dict[str, Any]]] = {}
    for r in trials.of_kind("request"):
        if r.get("ok") and (r.get("phase") == "measured" or (r.get("phase") is None and not r.get("warmup"))):
            reqs.setdefault(r["launch_id"], []).append(r)
    out = []
    for lid, a in argv.items():
        w, rs = work.get(lid), reqs.get(lid)
        if w is None or not rs or w.get("mode") != "closed":
            continue
        wl = w.get("workload") or {}
        prompts = [int(r["prompt_tokens"]) for r in rs if r.get("prompt_tokens")]
        outs = [int(r["completion_tokens"]) for r in rs if r.get("completion_tokens")]
        if not prompts or not outs:
            continue
        config = TwinConfig(engine=engine, flags=_engine_flags(a), tp_size=_tp(a),
                            concurrency=int(wl.get("concurrency") or 1),
                            prompt_tokens=round(statistics.mean(prompts)), output_tokens=round(statistics.mean(outs)),
                            requests=int(w.get("measured") or len(rs)), warmup=int(w.get("warmup") or 0))
        values = {m: [float(r[m]) for r in rs if isinstance(r.get(m), (int, float)) and r[m] > 0]
                  for m in FITTED_METRICS}
        accept = [float(r["accept_length"]) for r in rs if isinstance(r.get("accept_length"), (int, float))]
        cond = ",".join(f"{k}={v}" for k, v in sorted((w.get("levels") or {}).items())) + f"#{w.get('condition')}"
        out.append(Launch(lid, cond, config, values, accept))
    return sorted(out, key=lambda x: x.launch_id)


# --------------------------------------------------------------------------- plausibility

# What a pilot's measured values can be on any deployment the twin models (the twin's file bounds, core/twin.py,
# in seconds): a request's TPOT of more than one 10 s step or a TTFT over an hour, a tensor-parallel size above
# 1024, is a tampered or broken trials file, which a least-squares fit would fit without a word.
PLAUSIBLE_S = {"tpot_s": MAX_STEP_US / 1e6, "ttft_s": 3600.0}


def implausible(launches: list[Launch]) -> list[str]:
    """Each launch value no deployment produces ("LAUNCH: tpot_s 1e+300 (at most 10 s)"), in launch order."""
    out: list[str] = []
    for x in launches:
        if not 1 <= x.config.tp_size <= MAX_TP_SIZE:
            out.append(f"{x.launch_id}: tp_size {x.config.tp_size:g} (1 to {MAX_TP_SIZE})")
        for metric, hi in PLAUSIBLE_S.items():
            bad = [v for v in x.values.get(metric, []) if not (math.isfinite(v) and 0 < v <= hi)]
            if bad:
                more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
                out.append(f"{x.launch_id}: {metric} {max(bad):g}{more} (0 to {hi:g} s)")
        bad_acc = [v for v in x.accept if not (math.isfinite(v) and 0 <= v <= RANGES["accept_length"][1] + 1)]
        if bad_acc:
            out.append(f"{x.launch_id}: accept_length {max(bad_acc):g} (0 to {RANGES['accept_length'][1] + 1:g})")
    return out


# --------------------------------------------------------------------------- the fit


def _start(launches: list[Launch]) -> dict[str, float]:
    tpot = statistics.median(v for x in launches for v in x.values.get("tpot_s", [])) * 1e6
    ttft = statistics.median(v for x in launches for v in x.values.get("ttft_s", [])) * 1e6
    acc = [v for x in launches for v in x.accept]
    return {"decode_step_us": tpot, "decode_us_per_token": tpot * 0.05, "prefill_base_us": ttft * 0.5,
            "prefill_us_per_token": ttft * 0.5 / max(1.0, statistics.median(x.config.prompt_tokens for x in launches)),
            "prefill_chunk_us": tpot, "thread_exponent": 0.5, "allreduce_us_per_token": tpot * 0.05,
            "spec_overhead_us": tpot * 0.1, "accept_length": statistics.mean(acc) if acc else 2.0,
            "eager_step_us": tpot * 0.5}


class _Model:
    """Predictions at the pilot's distinct configurations, cached by parameter values."""

    def __init__(self, base: TwinFit, predict: Predict, configs: list[TwinConfig]) -> None:
        self.base, self.predict, self.configs = base, predict, configs
        self._cache: dict[tuple, list[dict[str, float]]] = {}

    def at(self, values: dict[str, float]) -> list[dict[str, float]]:
        key = tuple(sorted(values.items()))
        if key not in self._cache:
            fit = self.base.with_values(values)
            self._cache[key] = [self.predict(fit, c) for c in self.configs]
        return self._cache[key]


def _residuals(model: _Model, launches: list[Launch], index: list[int], values: dict[str, float],
               weights: list[dict[str, float]], spec: bool) -> np.ndarray:
    """Launch-major residuals (each launch's metrics in FITTED_METRICS order, then its accept length), each
    divided by that launch's weight for the metric."""
    preds = model.at(values)
    out = []
    for x, i, w in zip(launches, index, weights, strict=True):
        for m in FITTED_METRICS:
            obs, pred = x.mean(m), preds[i].get(m)
            if obs is None or pred is None or not math.isfinite(pred) or pred <= 0:
                out.append(0.0)
                continue
            out.append((math.log(obs) - math.log(pred)) / w[m])
        if spec:
            out.append(((statistics.mean(x.accept) - values.get("accept_length", 1.0)) / w["accept_length"])
                       if x.accept else 0.0)
    return np.asarray(out)


# A flag set keeps a residual of its own when the pilot ran two or more and each keeps at least this many
# residual degrees of freedom (its launches less its share of the parameters): fewer, and its sd would be a
# guess that the t quantile could not carry.
MIN_GROUP_DF = 2.0


def _flag_groups(launches: list[Launch], params: int, per: int) -> dict[tuple[str, ...], list[int]]:
    """Launch indices by flag set, when each flag set gets its own residual (else empty: one pooled residual)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, x in enumerate(launches):
        groups.setdefault(tuple(x.config.flags), []).append(i)
    n = len(launches)
    if len(groups) < 2 or any(_group_df(len(g), n, params, per) < MIN_GROUP_DF for g in groups.values()):
        return {}
    return groups


def _group_df(n_group: int, n: int, params: int, per: int) -> float:
    """A flag set's residual degrees of freedom: its launches less its share (n_group / n) of the parameters
    that each metric's residuals carry (params / per), as the pooled residual's n - params / per."""
    return n_group - params / per * n_group / n


def _unweighted(r: np.ndarray, per: int, k: int, rows: list[int], weights: list[dict[str, float]],
                metric: str) -> np.ndarray:
    """Metric `k`'s log residuals over launches `rows`, their weights taken off."""
    return np.asarray([r[i * per + k] * weights[i][metric] for i in rows])


def _rms(r: np.ndarray, per: int, k: int, rows: list[int], weights: list[dict[str, float]], metric: str) -> float:
    """The root mean square of metric `k`'s unweighted residuals over launches `rows`."""
    return max(float(np.sqrt(np.mean(_unweighted(r, per, k, rows, weights, metric) ** 2))), 1e-4)


def _jacobian(fun: Callable[[dict[str, float]], np.ndarray], values: dict[str, float],
              names: list[str]) -> np.ndarray:
    base = fun(values)
    cols = []
    for n in names:
        h = max(abs(values[n]) * 1e-4, 1e-6 if n in ("thread_exponent", "accept_length") else 1e-3)
        cols.append((fun({**values, n: values[n] + h}) - base) / h)
    return np.column_stack(cols) if cols else np.zeros((len(base), 0))


def _identifiable(jac: np.ndarray, names: list[str], scale: dict[str, float]) -> tuple[list[str], dict[str, str]]:
    """Greedy in PARAMETERS order: a parameter is kept when its (scaled) column adds rank."""
    kept: list[int] = []
    why: dict[str, str] = {}
    scaled = jac * np.asarray([scale[n] for n in names])
    total = np.linalg.norm(scaled) or 1.0
    for j, n in enumerate(names):
        col = scaled[:, j]
        if np.linalg.norm(col) <= RANK_TOL * total:
            why[n] = "the pilot never varied what it acts on"
            continue
        trial = scaled[:, kept + [j]]
        s = np.linalg.svd(trial, compute_uv=False)
        if s[-1] <= 1e-7 * s[0]:
            why[n] = f"confounded with {', '.join(names[k] for k in kept)} in this pilot"
            continue
        kept.append(j)
    return [names[k] for k in kept], why


def _noise(launches: list[Launch], metric: str) -> tuple[float | None, float | None, int, int]:
    """(launch sd, request sd) of log `metric` by one-way ANOVA within conditions; None where not estimable."""
    within_ss, within_df, m_sizes = 0.0, 0, []
    by_cond: dict[str, list[list[float]]] = {}
    for x in launches:
        logs = [math.log(v) for v in x.values.get(metric, []) if v > 0]
        if not logs:
            continue
        by_cond.setdefault(x.condition, []).append(logs)
        mu = statistics.mean(logs)
        within_ss += sum((v - mu) ** 2 for v in logs)
        within_df += len(logs) - 1
        m_sizes.append(len(logs))
    request_var = within_ss / within_df if within_df > 0 else None
    between_ss, between_df = 0.0, 0
    for groups in by_cond.values():
        if len(groups) < 2:
            continue
        means = [statistics.mean(g) for g in groups]
        mu = statistics.mean(means)
        between_ss += sum((v - mu) ** 2 for v in means)
        between_df += len(means) - 1
    launch_sd = None
    if between_df > 0:
        m = statistics.harmonic_mean(m_sizes) if m_sizes else 1.0
        var = between_ss / between_df - (request_var or 0.0) / m
        launch_sd = math.sqrt(max(0.0, var))
    return launch_sd, (math.sqrt(request_var) if request_var is not None else None), len(launches), sum(m_sizes)


def _residual_noise(launches: list[Launch], r: np.ndarray, weights: list[dict[str, float]], rows: list[int],
                    params: int, per: int) -> dict[str, MetricNoise]:
    """Each fitted metric's noise over launches `rows`: the residual sd of their launch means about the model
    (degrees of freedom: the launches less their share of the parameters) and the ANOVA components."""
    out = {}
    df = _group_df(len(rows), len(launches), params, per)
    for k, m in enumerate(FITTED_METRICS):
        resid = _unweighted(r, per, k, rows, weights, m)
        launch_sd, request_sd, nl, nr = _noise([launches[i] for i in rows], m)
        out[m] = MetricNoise(launch_log_sd=launch_sd, request_log_sd=request_sd,
                             residual_log_sd=float(np.sqrt(np.sum(resid ** 2) / max(1.0, df))),
                             residual_df=max(1, int(round(df))), launches=nl, requests=nr)
    return out


def fit(launches: list[Launch], predict: Predict, *, engine: str, name: str = "twin",
        reference_threads: int | None = None, fixed: dict[str, Any] | None = None,
        pilots: list[dict[str, Any]] | None = None) -> TwinFit:
    """The twin of `engine` fitted to the pilot launches (raises FitError when nothing can be fitted)."""
    from scipy.optimize import least_squares

    launches = [x for x in launches if x.mean("tpot_s") and x.mean("ttft_s")]
    if not launches:
        raise FitError("no launch measured both ttft_s and tpot_s (a closed loop with >= 2 output tokens)")
    base = blank(engine, name, reference_threads)  # type: ignore[arg-type]
    configs: list[TwinConfig] = []
    index = []
    for x in launches:
        if x.config not in configs:
            configs.append(x.config)
        index.append(configs.index(x.config))
    spec = any(x.accept for x in launches)
    model = _Model(base, predict, configs)
    names = list(PARAMETERS)
    start = _start(launches)
    scale = {n: (abs(start[n]) or 1.0) for n in names}
    weights = [{"ttft_s": 1.0, "tpot_s": 1.0, "accept_length": 0.1} for _ in launches]

    def fun_all(v: dict[str, float]) -> np.ndarray:
        return _residuals(model, launches, index, v, weights, spec)

    jac0 = _jacobian(fun_all, start, names)
    free, why = _identifiable(jac0, names, scale)
    if not free:
        raise FitError("no parameter is identifiable from these launches")
    held = {n: 0.0 for n in names if n not in free}
    values = {**start, **held}

    def solve(v0: dict[str, float]) -> dict[str, float]:
        x0 = np.asarray([v0[n] / scale[n] for n in free])
        lo = np.asarray([LOWER.get(n, 0.0) / scale[n] for n in free])
        hi = np.asarray([UPPER.get(n, np.inf) / scale[n] for n in free])
        x0 = np.clip(x0, lo, hi)

        def f(x: np.ndarray) -> np.ndarray:
            return fun_all({**held, **{n: float(xi * scale[n]) for n, xi in zip(free, x, strict=True)}})

        res = least_squares(f, x0, bounds=(lo, hi), x_scale="jac", diff_step=1e-4, max_nfev=200)
        return {**held, **{n: float(xi * scale[n]) for n, xi in zip(free, res.x, strict=True)}}

    values = solve(values)
    # second pass: each metric weighted by its residual sd
    r = fun_all(values)
    per = len(FITTED_METRICS) + (1 if spec else 0)
    every = list(range(len(launches)))
    for k, m in enumerate([*FITTED_METRICS, *(["accept_length"] if spec else [])]):
        sd = _rms(r, per, k, every, weights, m)
        for w in weights:
            w[m] = sd
    values = solve(values)
    # third pass, with flag sets that each keep a residual: each metric weighted by its sd at each flag set
    # (weighted least squares: a noisy arm does not pull the parameters a quiet arm's predictions rest on)
    groups = _flag_groups(launches, len(free), per)
    if groups:
        r = fun_all(values)
        new = [dict(w) for w in weights]
        for rows in groups.values():
            for k, m in enumerate(FITTED_METRICS):
                sd = _rms(r, per, k, rows, weights, m)
                for i in rows:
                    new[i][m] = sd
        weights[:] = new
        values = solve(values)
    r = fun_all(values)
    jac = _jacobian(fun_all, values, free)
    n_obs, p = len(r), len(free)
    dof = max(1, n_obs - p)
    s2 = float(np.sum(r ** 2)) / dof if n_obs > p else float("nan")
    try:
        cov = np.linalg.pinv(jac.T @ jac) * s2
    except np.linalg.LinAlgError:
        cov = np.full((p, p), np.nan)
    params: dict[str, Parameter] = {}
    for n in names:
        unit, needs = PARAMETERS[n]
        if n in free:
            j = free.index(n)
            se = float(math.sqrt(cov[j, j])) if math.isfinite(cov[j, j]) and cov[j, j] >= 0 else None
            params[n] = Parameter(estimate=values[n], se=se, unit=unit, identifiable=True, needs=needs)
        else:
            params[n] = Parameter(estimate=None, unit=unit, identifiable=False, needs=needs, reason=why.get(n, ""))
    covariance = {a: {b: float(cov[i, j]) for j, b in enumerate(free)} for i, a in enumerate(free)}
    noise = _residual_noise(launches, r, weights, every, p, per)
    noise_by_flags = [FlagNoise(flags=list(flags), noise=_residual_noise(launches, r, weights, rows, p, per))
                      for flags, rows in groups.items()]
    notes = []
    for n in free:
        lo, hi = LOWER.get(n, 0.0), UPPER.get(n, math.inf)
        if math.isclose(values[n], lo, abs_tol=1e-9 * max(1.0, abs(lo))) or values[n] >= hi * (1 - 1e-9):
            notes.append(f"{n} ended at its bound ({values[n]:.4g}): the model does not fit what the pilot measured "
                         "there; its standard error is not a valid interval")
    if n_obs <= p:
        notes.append(f"{n_obs} observations for {p} parameters: no standard errors")
    tps = sorted({c.tp_size for c in configs})
    fixed = {**({"tp_size": tps[0]} if len(tps) == 1 and tps[0] != 1 else {}), **(fixed or {})}
    return base.model_copy(update={"parameters": params, "covariance": covariance, "noise": noise,
                                   "noise_by_flags": noise_by_flags, "pilots": pilots or [],
                                   "configs_fitted": len(configs), "fixed": fixed,
                                   "notes": notes, "domain": domain_of(configs)})


# --------------------------------------------------------------------------- the pilot's machine

# The rule that marks a pilot as measured on a busy machine (fixed before any pilot was looked at): a launch whose
# host's 1-minute load average was above its core count (more runnable work than cores: the server waited for a
# CPU), or a launch-to-launch sd of a fitted metric above 10% on the log scale (launches at the same settings
# 10% apart: a quiet GPU host shows 0.01%, the sim's own noise 0.6%).
BUSY_LAUNCH_LOG_SD = 0.10


def pilot_host(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The pilot's host, CPU model and load, as its trials recorded them (the environment row, the launches'
    `machine` and `load`): {host, cpu, cores, load_1m_median, load_1m_max, launches_with_load}."""
    trials = Trials.of(rows)
    env = next(iter(trials.of_kind("environment")), None) or {}
    launches = [r for r in trials.of_kind("launch") if r.get("ok")]
    machine = next((r["machine"] for r in launches if isinstance(r.get("machine"), dict)), {})
    loads = [r["load"] for r in launches if isinstance(r.get("load"), dict)
             and isinstance(r["load"].get("load_1m"), (int, float))]
    ones = [float(x["load_1m"]) for x in loads]
    cores = next((int(x["cores"]) for x in loads if isinstance(x.get("cores"), int)), None)
    return {"host": env.get("host") or machine.get("host"), "cpu": env.get("cpu") or machine.get("cpu"),
            "cores": cores, "load_1m_median": statistics.median(ones) if ones else None,
            "load_1m_max": max(ones) if ones else None, "launches_with_load": len(ones)}


def busy(hosts: list[dict[str, Any]], noise: dict[str, MetricNoise]) -> list[str]:
    """Why the pilot's machine looked busy under the rule above (empty: it did not, or nothing says)."""
    out = []
    for h in hosts:
        if h.get("load_1m_max") is not None and h.get("cores") and h["load_1m_max"] > h["cores"]:
            out.append(f"{h.get('host') or 'a pilot host'}: load average {h['load_1m_max']:g} above its "
                       f"{h['cores']} cores during a launch")
    for m, nz in noise.items():
        if nz.launch_log_sd is not None and nz.launch_log_sd > BUSY_LAUNCH_LOG_SD:
            out.append(f"{m}: launch sd {nz.launch_log_sd:.1%} above {BUSY_LAUNCH_LOG_SD:.0%} between launches at "
                       "the same settings")
    return out


# --------------------------------------------------------------------------- predictions with intervals


def _noise_sd(fit: TwinFit, metric: str, ttft_share: float | None = None,
              flags: list[str] | None = None) -> tuple[float, int]:
    """The residual log sd (and its df) a new launch's `metric` at `flags` varies by about the model (that flag
    set's residual where the fit kept one, else the pooled one).

    e2e and output tok/s are TTFT plus the decode (e2e = ttft + (n - 1) tpot): by the delta method their log
    moves by ``w d log ttft + (1 - w) d log decode``, ``w`` the predicted TTFT's share of e2e, so their residual
    sd is at most ``w s_ttft + (1 - w) s_tpot`` whatever the two residuals' correlation (the bound at
    correlation 1). Without the share, the larger of the two (the bound at w = 0 or 1)."""
    noise = fit.noise_at(flags) if flags is not None else fit.noise
    t, d = noise.get("ttft_s"), noise.get("tpot_s")
    if metric == "ttft_s" and t:
        return t.residual_log_sd, t.residual_df
    if metric in ("tpot_s", "decode_tok_s") and d:
        return d.residual_log_sd, d.residual_df
    both = [x for x in (t, d) if x]
    if t and d and ttft_share is not None and 0.0 <= ttft_share <= 1.0:
        return (ttft_share * t.residual_log_sd + (1.0 - ttft_share) * d.residual_log_sd,
                min(t.residual_df, d.residual_df))
    return (max(x.residual_log_sd for x in both), min(x.residual_df for x in both)) if both else (0.0, 1)


def mark(prediction: dict[str, Any]) -> str:
    """The words a printed twin prediction carries: which parameters it needs that the pilot did not identify
    (then it has no interval) and why it extrapolates; empty for an interpolation with an interval."""
    words = []
    if prediction.get("not_identified"):
        words.append(f"no interval: needs {', '.join(prediction['not_identified'])}, which the pilot did not "
                     "identify")
    if prediction.get("extrapolation"):
        words.append(f"extrapolation: {'; '.join(prediction['extrapolation'])}")
    return "; ".join(words)


def _absorbed(fit: TwinFit, config: TwinConfig) -> set[str]:
    """Unidentified parameters whose effect the fitted ones already hold at `config`: the spec overhead at the one
    stream count and a flag set the pilot ran (below); the all-reduce cost at the one TP size the pilot ran (a T
    and a P are d0 + d1 (T - 1) and p1 P terms again, so the fit measured d0 + a, d1 + a and p1 + a there);
    elsewhere it is unknown and blocks the interval."""
    domain = fit.domain
    out = set()
    if domain is not None and domain.tp_size == [config.tp_size]:
        out.add("allreduce_us_per_token")
    # the spec overhead at the one stream count the pilot ran, with flags it ran: a verify step of the same
    # width T (streams x draft tokens), whose d0 + d1 (T - 1) + o the fit measured there as one sum
    if domain is not None and domain.concurrency == (config.concurrency, config.concurrency) \
            and list(config.flags) in domain.flags:
        out.add("spec_overhead_us")
    return out


def predict_interval(fit: TwinFit, config: TwinConfig, predict: Predict, *, level: float = 0.9,
                     metrics: Iterable[str] = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s", "output_tok_s"),
                     ) -> dict[str, dict[str, Any]]:
    """Each metric's predicted launch mean and `level` prediction interval for a new launch at `config`:
    parameter uncertainty (delta method, log scale) plus the fit's residual noise, t quantile. A metric that
    moves with a parameter the pilot could not identify gets no interval and says which."""
    from scipy import stats

    metrics = list(metrics)
    mean = predict(fit, config)
    free = [n for n, p in fit.parameters.items() if p.identifiable]
    unknown = [n for n, p in fit.parameters.items() if not p.identifiable]
    cov = np.asarray([[fit.covariance.get(a, {}).get(b, 0.0) for b in free] for a in free]) if free else None
    grads: dict[str, list[float]] = {m: [] for m in metrics}
    blocked: dict[str, list[str]] = {m: [] for m in metrics}
    absorbed = _absorbed(fit, config)
    for n in free + unknown:
        v = fit.value(n)
        h = max(abs(v) * 1e-4, 1e-6 if n in ("thread_exponent", "accept_length") else 1e-3)
        moved = predict(fit.with_values({n: v + h}), config)
        for m in metrics:
            g = (math.log(moved[m]) - math.log(mean[m])) / h if mean[m] > 0 and moved[m] > 0 else 0.0
            if n in free:
                grads[m].append(g)
            elif n not in absorbed and abs(g) * max(abs(v), h, 1.0) > 1e-9:
                blocked[m].append(n)
    out: dict[str, dict[str, Any]] = {}
    outside = extrapolation(fit.domain, config)
    for m in metrics:
        if blocked[m] or not (mean[m] > 0 and math.isfinite(mean[m])):
            out[m] = {"mean": mean[m], "low": None, "high": None, "log_sd": None,
                      "not_identified": blocked[m], "extrapolation": outside}
            continue
        g = np.asarray(grads[m])
        var_par = float(g @ cov @ g) if cov is not None and len(g) else 0.0
        share = mean["ttft_s"] / mean["e2e_s"] if mean.get("ttft_s") and mean.get("e2e_s") else None
        noise, df = _noise_sd(fit, m, share, list(config.flags))
        sd = math.sqrt(max(0.0, var_par) + noise ** 2)
        q = float(stats.t.ppf(0.5 + level / 2, max(1, df)))
        out[m] = {"mean": mean[m], "low": mean[m] * math.exp(-q * sd), "high": mean[m] * math.exp(q * sd),
                  "log_sd": sd, "level": level, "not_identified": [], "extrapolation": outside}
    return out
