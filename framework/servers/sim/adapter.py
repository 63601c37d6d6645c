"""What the run path asks of the simulator beyond HTTP: what it models, how honest its clock was,
and its model of a profile for planning.

The backend table names this module by a string (`Backend.adapter`); the run path loads it lazily
(`framework.execution.adapters.load`) and never imports the sim, so the layers stay apart. Every
function is pure over plain data (a hypothesis, an experiment, trial rows) and returns plain data:
the run shell decides what to refuse, print and record.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from framework.core import design as design_mod
from framework.core.spec import Experiment, Hypothesis
from framework.core.workload import mean_length
from framework.servers.sim import coverage as coverage_mod
from framework.servers.sim import fidelity
from framework.servers.sim.profile import ProfileError, load_profile

SIM_LAG_WARN = fidelity.SIM_LAG_WARN


def coverage(h: Hypothesis, exp: Experiment) -> dict[str, Any]:
    """What the sim does not model here: `problems` (argv it cannot parse), `refused` (lines naming a varied
    flag it cannot answer for) and the record's fields (`unmodelled_varied`, `..._flags`, `..._constant`)."""
    conds = coverage_mod.conditions(h, exp)
    cov = coverage_mod.check(conds)
    return {**cov.as_dict(), "problems": list(cov.problems), "refused": [f.line() for f in cov.refused],
            "profile_problems": profile_problems(conds), "unanswerable": coverage_mod.unanswerable(h)}


def profile_problems(conds: list[coverage_mod.Condition]) -> list[str]:
    """Each sim profile that cannot be loaded, once: every launch of its condition would fail to start."""
    out: list[str] = []
    for profile in sorted({c.profile for c in conds}):
        try:
            load_profile(profile)
        except ProfileError as exc:
            labels = ", ".join(c.label for c in conds if c.profile == profile)
            out.append(f"{exc} (condition {labels})")
    return out


def timing(h: Hypothesis, exp: Experiment, rows: list[dict[str, Any]], *, launched: bool = True) -> dict[str, Any]:
    """How far the machine left the model's clock from the workload's (the record's `analysis.sim_*` fields).

    `launched`: this run started the sim with the experiment's profile, so the model's expected batch applies
    (the clock-bias check); a sim reached as an endpoint runs a profile the run does not know."""
    metric_lags = fidelity.sim_metric_lags(rows, h.metric)
    biases = fidelity.sim_clock_bias(h, exp, rows) if launched else {}
    return {
        "sim_max_relative_lag": fidelity.sim_relative_lag(rows),
        "sim_metric_relative_lag_median": statistics.median(metric_lags) if metric_lags else None,
        "sim_metric_relative_lag_max": max(metric_lags) if metric_lags else None,
        "sim_clock_bias": biases,
        "sim_clock_bias_max": max(biases.values()) if biases else None,
        "sim_open_loop_arrival_late": fidelity.sim_open_loop_lateness(rows),
    }


def warnings(h: Hypothesis, lag: dict[str, Any], speedup: float) -> list[str]:
    """What the run prints when the clock's honesty is in doubt (and what to do about it)."""
    out: list[str] = []
    worst = lag.get("sim_clock_bias_max")
    biases = lag.get("sim_clock_bias") or {}
    if worst is not None and worst > SIM_LAG_WARN:
        out.append(f"warning: the machine could not keep the simulator's batch full: measured bias of "
                   f"the model clock up to {worst:.1%} ({', '.join(f'{k}: {v:.1%}' for k, v in biases.items())}); "
                   f"verdicts it could move are marked UNRELIABLE; lower backend.speedup (now {speedup:g})")
    late = lag.get("sim_open_loop_arrival_late")
    if fidelity.open_loop_mark(late):
        out.append(f"warning: open-loop requests reached the simulator's model clock late against their "
                   f"schedule: median {late['median_s'] * 1e3:.1f} ms, max {late['max_s'] * 1e3:.1f} ms of model "
                   f"time ({late['median_relative']:.1%} of a median request); the sim does not correct this "
                   f"(docs/model.md, Timing), so verdicts are marked UNRELIABLE: lower backend.speedup "
                   f"(now {speedup:g})")
    typical = lag.get("sim_metric_relative_lag_median")
    if typical is not None and typical > SIM_LAG_WARN:
        out.append(f"warning: the simulator could not keep its clock: in a typical measured request its "
                   f"lateness may have moved {h.metric} by up to {typical:.1%}; lower "
                   f"backend.speedup (now {speedup:g})")
    return out


def marks(h: Hypothesis, prediction: dict[str, Any], lag: dict[str, Any]) -> list[str]:
    """What must be said beside a verdict because of the clock: its measured bias could move the decision,
    or open-loop arrivals reached it late."""
    out: list[str] = []
    bias = lag.get("sim_clock_bias_max")
    if bias and fidelity.decision_could_move(h, prediction, bias):
        out.append(f"UNRELIABLE: the sim's clock bias (up to {bias:.1%} per condition) could move this decision")
    late = fidelity.open_loop_mark(lag.get("sim_open_loop_arrival_late"))
    if late and prediction.get("kind") != "launches":
        out.append(late)
    return out


def plan_assumptions(h: Hypothesis, exp: Experiment, *,
                     measurement: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The sim's model of the profile as `plan`'s / `plan_anytime`'s keyword arguments, and a line saying so."""
    from framework.servers.sim.expected import expected_metrics
    from framework.servers.sim.model import request_log_sd

    if is_twin(h, exp):
        return twin_plan_assumptions(h, exp)
    means: dict[int, float] = {}
    sd_req: dict[int, float] = {}
    launch_cost: dict[int, float] = {}
    request_cost: dict[int, float] = {}
    sd_launch = 0.0
    slow_prob, slow_factor = 0.0, 1.0
    for cond in design_mod.conditions(h):
        profile = load_profile(design_mod.sim_profile_for(h, exp, cond))
        flags = design_mod.server_args_for(h, exp, cond)
        w = design_mod.workload_for(h, exp, cond)
        if w.open_loop or w.dataset is not None:
            raise ValueError(f"the simulator's planning model covers closed-loop synthetic workloads; condition "
                             f"{cond.label()} runs an open loop or a dataset: plan from a pilot run "
                             f"(plan hypothesis={h.name} pilot=RUN_DIR)")
        try:
            m = expected_metrics(profile, flags, mean_length(w.prompt_tokens), mean_length(w.output_tokens),
                                 w.concurrency, requests=h.design.requests, warmup=h.design.warmup)
        except Exception:  # a configuration the profile cannot start (a launches prediction)
            continue
        value = m.get(h.metric)
        if isinstance(value, (int, float)) and value > 0:
            means[cond.index] = float(value)
        sd_launch = max(sd_launch, float(m["launch_log_sd"]))
        slow_prob, slow_factor = float(m["slow_launch_prob"]), float(m["slow_launch_factor"])
        sd_req[cond.index] = (request_log_sd(profile, flags, mean_length(w.output_tokens))
                              if h.metric == "decode_tok_s" else float(m["request_log_sd"]))
        launch_cost[cond.index] = float(profile.startup_s)
        request_cost[cond.index] = float(m["e2e_s"])
    if measurement:  # what measuring adds on this machine: independent of the model's noise, so variances add
        sd_launch = math.hypot(sd_launch, float(measurement["between"]))
        for c, extra in measurement["within"].items():
            if c in sd_req:
                sd_req[c] = math.hypot(sd_req[c], float(extra))
    # a slow launch makes every forward slower: rates fall by the factor, times rise by it
    slower = 1.0 / slow_factor if h.metric in ("decode_tok_s", "output_tok_s") else slow_factor
    assumptions = {"means": means, "sd_launch_log": sd_launch, "sd_request_log": sd_req, "launch_cost_s": launch_cost,
                   "request_cost_s": request_cost, "slow_launch_prob": slow_prob, "slow_launch_factor": slower}
    source = (f"assumptions from the simulator's model of profile {exp.sim.profile!r}: expected means, launch sd "
              f"{sd_launch:.2%} plus {slow_prob:.0%} slow launches ({slow_factor - 1:+.0%}), per-request sd by Monte "
              f"Carlo of its noise model, launch cost = profile start-up "
              f"({launch_cost and next(iter(launch_cost.values())):.0f} s; "
              "a real launch of a large model takes minutes: "
              f"plan from a pilot run for real costs)")
    if measurement:
        within = ", ".join(f"{v:.2%}" for _, v in sorted(measurement["within"].items()))
        source += (f"; plus the sim's measurement noise on this machine, probed now with its noise model off "
                   f"({measurement['launches']} launches x {measurement['requests']} requests per condition at "
                   f"speed-up {measurement['speedup']:g}): between launches {measurement['between']:.2%}, "
                   f"per request {within} (probe=false leaves it out)")
    return assumptions, source


def twin_predict(fit: Any, config: Any) -> dict[str, float]:
    """A fitted twin's noise-free launch means at a configuration (framework.servers.sim.twin.predict)."""
    from framework.servers.sim.twin import predict

    return predict(fit, config)


def twin_engine_summary(config: Any) -> dict[str, Any]:
    """What a twin reads from a configuration's engine flags (threads, prefill chunk, slots, context)."""
    from framework.core.twin import blank
    from framework.servers.sim.twin import engine_summary

    return engine_summary(blank(config.engine), config)


def twin_config(h: Hypothesis, exp: Experiment, cond: Any, engine: str, *, requests: int, warmup: int) -> Any:
    """A condition as a twin's configuration (its engine's flags and the workload's typical lengths)."""
    from framework.core.twin import TwinConfig

    w = design_mod.workload_for(h, exp, cond)
    return TwinConfig(engine=engine, flags=list(design_mod.server_args_for(h, exp, cond)), tp_size=exp.tp_size,
                      concurrency=w.concurrency, prompt_tokens=mean_length(w.prompt_tokens),
                      output_tokens=mean_length(w.output_tokens), requests=requests, warmup=warmup)


def twin_predictions(h: Hypothesis, exp: Experiment, *, requests: int, warmup: int,
                     level: float = 0.9) -> dict[str, Any] | None:
    """Per condition, a fitted twin's predicted launch mean and prediction interval of every request metric
    (framework.analysis.twinfit.predict_interval); None unless the conditions run a twin profile."""
    from framework.analysis.twinfit import predict_interval
    from framework.servers.sim.twin import predict

    out: dict[str, Any] = {}
    for cond in design_mod.conditions(h):
        try:
            profile = load_profile(design_mod.sim_profile_for(h, exp, cond))
        except ProfileError:
            return None
        if profile.twin is None:
            return None
        w = design_mod.workload_for(h, exp, cond)
        if w.open_loop or w.dataset is not None:
            out[cond.label()] = {"not_predicted": "the twin predicts closed-loop synthetic workloads only"}
            continue
        config = twin_config(h, exp, cond, profile.twin.engine, requests=requests, warmup=warmup)
        out[cond.label()] = predict_interval(profile.twin, config, predict, level=level)
    return out


def twin_plan_draws(h: Hypothesis, exp: Experiment, *, requests: int, warmup: int,
                    progress: Any = None) -> dict[str, Any]:
    """The twin's uncertainty for `plan` (framework.analysis.twin_assurance): per parameter draw, every
    condition's true launch mean of the metric, and the conditions whose metric needs an unidentified parameter."""
    from framework.analysis.twin_assurance import condition_draws
    from framework.analysis.twinfit import predict_interval
    from framework.servers.sim.twin import predict

    conds: dict[int, Any] = {}
    blocked: dict[int, list[str]] = {}
    for cond in design_mod.conditions(h):
        path = design_mod.sim_profile_for(h, exp, cond)
        fit = load_profile(path).twin
        assert fit is not None
        config = twin_config(h, exp, cond, fit.engine, requests=requests, warmup=warmup)
        conds[cond.index] = (str(path), fit, config)
        iv = predict_interval(fit, config, predict, metrics=(h.metric,)).get(h.metric) or {}
        if iv.get("not_identified"):
            blocked[cond.index] = list(iv["not_identified"])
    draws = condition_draws(conds, h.metric, predict, requests=requests, blocked=blocked, progress=progress)
    return {"draws": draws, "blocked": blocked}


TWIN_ENGINES_WITH_FLAGS = ("llamacpp", "llama_server", "vllm")  # engines whose flag names the sim takes


def profile_engine(path: Path) -> str | None:
    """The engine whose flag names the sim takes on a profile file: a twin fitted to an engine with its own
    flags (llama.cpp, vLLM; docs/model.md, "Twin"); None for any other profile. ValueError (one line, without
    the path) when the file is too large, not readable YAML or not a valid profile: a twin's values are
    bounded (core/twin.py), so a NaN or 1e300 estimate is refused before any server starts."""
    try:
        profile = load_profile(str(path))
    except (OSError, ProfileError) as exc:
        raise ValueError(str(exc).removeprefix(f"{path}: ")) from None
    twin = profile.twin
    if twin is not None and twin.engine in TWIN_ENGINES_WITH_FLAGS:
        return str(twin.engine)
    return None


def is_twin(h: Hypothesis, exp: Experiment) -> bool:
    """Every condition runs a fitted twin profile (`sim_profile=` a `framework fit` document)."""
    try:
        return all(load_profile(design_mod.sim_profile_for(h, exp, c)).twin is not None
                   for c in design_mod.conditions(h))
    except ProfileError:
        return False


def twin_plan_assumptions(h: Hypothesis, exp: Experiment) -> tuple[dict[str, Any], str]:
    """`plan`'s assumptions from a fitted twin: its predicted means, its launch and request noise (log scale) of
    the metric, the pilot's launch start-up and the twin's request time as costs."""
    from framework.servers.sim.twin import predict

    means: dict[int, float] = {}
    sd_req: dict[int, float] = {}
    sd_launch: dict[int, float] = {}
    launch_cost: dict[int, float] = {}
    request_cost: dict[int, float] = {}
    notes: set[str] = set()
    for cond in design_mod.conditions(h):
        fit = load_profile(design_mod.sim_profile_for(h, exp, cond)).twin
        assert fit is not None
        w = design_mod.workload_for(h, exp, cond)
        if w.open_loop or w.dataset is not None:
            raise ValueError(f"the twin predicts closed-loop synthetic workloads; condition {cond.label()} runs an "
                             "open loop or a dataset")
        config = twin_config(h, exp, cond, fit.engine, requests=h.design.requests, warmup=h.design.warmup)
        m = predict(fit, config)
        value = m.get(h.metric)
        if isinstance(value, (int, float)) and value > 0 and math.isfinite(value):
            means[cond.index] = float(value)
        nz = fit.noise.get("ttft_s" if h.metric == "ttft_s" else "tpot_s")
        if nz is not None:
            if nz.launch_log_sd is None:
                notes.add(f"{fit.name}: no launch sd (the pilot ran one launch per configuration): its residual "
                          f"sd {nz.residual_log_sd:.1%} stands in")
            sd_launch[cond.index] = nz.launch_log_sd if nz.launch_log_sd is not None else nz.residual_log_sd
            sd_req[cond.index] = nz.request_log_sd or 0.0
        launch_cost[cond.index] = float(fit.fixed.get("launch_startup_s", 1.0))
        request_cost[cond.index] = float(m["e2e_s"])
    assumptions = {"means": means, "sd_launch_log": sd_launch, "sd_request_log": sd_req,
                   "launch_cost_s": launch_cost, "request_cost_s": request_cost}
    source = (f"assumptions from the twin {exp.sim.profile!r} (fitted by `framework fit`): its predicted means, the "
              "pilot's launch and request noise of the metric, launch cost = the pilot's median start-up, no probe "
              "(the twin's noise is the deployment's own)" + "".join(f"; {n}" for n in sorted(notes)))
    return assumptions, source
