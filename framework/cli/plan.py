"""`python -m framework plan hypothesis=NAME [pilot=RUN_DIR] [power=0.9] [KEY=VALUE...]`.

Launches per condition needed for the target power on each prediction, and the expected wall
time. The assumptions come from a pilot run's trials (its means, variance components and
measured launch and request costs) or, without a pilot, from the simulator's model of the
experiment's hardware profile (expected means and its noise magnitudes, launch cost = the
profile's start-up time). The printout says which.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from framework.analysis import fleet
from framework.analysis.planning import (
    AnytimePlan,
    PlanRow,
    anytime_cap,
    launches_for_hypothesis,
    mode_shares,
    pilot_assumptions,
    plan,
    plan_anytime,
)
from framework.cli.args import kv_pairs
from framework.core.metrics import is_launch_metric
from framework.core.spec import Design, Experiment, Hypothesis
from framework.errors import EXIT_OK, ConfigError
from framework.execution import adapters
from framework.execution.backends import Backend
from framework.present.format import sig
from framework.present.progress import make_console
from framework.records.trials import read_trials
from framework.run.probe import probe_measurement_noise
from framework.run.resolve import precheck_one
from framework.stats.sequential import inflation_factor, sequential_cap

PLAN_KEYS = ("pilot", "power", "probe", "machine_sd", "per_machine")
PROBE_LAUNCHES, PROBE_REQUESTS = 2, 4  # per condition: enough to see the sim's measurement noise, ~15 s in all


def plan_from_profile(h: Hypothesis, exp: Experiment, *, power: float, requests: int, warmup: int,
                      alpha: float, measurement: dict[str, Any] | None = None) -> tuple[list[PlanRow], str]:
    """Plan from the sim's model of the profile, plus the measurement noise a probe saw (added in quadrature)."""
    assumptions, source = profile_assumptions(h, exp, measurement=measurement)
    return plan(h, **assumptions, requests=requests, warmup=warmup, power=power, alpha=alpha), source


def profile_assumptions(h: Hypothesis, exp: Experiment, *, row: Backend | None = None,
                        measurement: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The model's assumptions for `plan` / `plan_anytime` (the backend row's model adapter; the sim's by default)."""
    return adapters.planning_model(row).plan_assumptions(h, exp, measurement=measurement)


def main(args: list[str]) -> int:
    kv = kv_pairs(args)
    overrides = [f"{k}={v}" for k, v in kv.items() if k not in PLAN_KEYS]
    probe = str(kv.get("probe", "true")).lower()
    if probe not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigError("command line", "probe", f"true or false (got {kv['probe']!r})")
    try:
        cfg, resolved = precheck_one(overrides, "plan")
    except ConfigError as exc:
        if "." in exc.field or "unknown key" not in exc.message:
            raise
        raise ConfigError(exc.file, exc.field, f"{exc.message}; and plan's own: {', '.join(PLAN_KEYS)}") from None
    h, exp, d = resolved.hypothesis, resolved.experiment, resolved.design
    try:
        power = float(kv.get("power", 0.9))
    except ValueError:
        raise ConfigError("command line", "power", f"a number in (0, 1) (got {kv['power']!r})") from None
    if not 0 < power < 1:
        raise ConfigError("command line", "power", f"a number in (0, 1) (got {power})")
    if "pilot" in kv:
        trials = Path(kv["pilot"]) / "trials.jsonl"
        if not trials.exists():
            raise ConfigError("command line", "pilot", f"{kv['pilot']} is not a run directory (no trials.jsonl)")
        try:
            assumptions = pilot_assumptions(h, read_trials(trials), alpha=d.alpha, requests=d.requests,
                                            warmup=d.warmup)
        except ValueError as exc:
            raise ConfigError("command line", "pilot", str(exc)) from None
        source = f"assumptions from the pilot run {kv['pilot']}: its means, variance components and measured costs"
        if is_launch_metric(h.metric):
            source += (f"; {h.metric} is one value per launch, so its noise is the pilot's between-launch sd at "
                       f"the pilot's workload and requests per launch (keep them when you run the plan)")
    elif is_launch_metric(h.metric):
        raise ConfigError(
            "command line", "pilot",
            f"{h.metric} is a per-launch metric (a percentile, a throughput or goodput): the simulator's model has "
            f"no noise model for it, so the plan needs a pilot run: python -m framework run hypothesis={h.name} "
            f"design.launches=3, then plan hypothesis={h.name} pilot=RUN_DIR")
    else:
        measurement = None
        row = resolved.backend.table
        twin = row.simulated and getattr(adapters.for_row(row), "is_twin", lambda *_: False)(h, exp)
        if probe not in ("false", "0", "no") and row.simulated and not twin:
            measurement = probe_measurement_noise(cfg, resolved, launches=PROBE_LAUNCHES, requests=PROBE_REQUESTS)
        try:
            assumptions, source = profile_assumptions(h, exp, row=row, measurement=measurement)
        except ValueError as exc:
            raise ConfigError("command line", "pilot", str(exc)) from None
    if d.analysis == "anytime":
        design_cap = d.sequential.max_launches if d.sequential.enabled else d.launches
        any_plan = plan_anytime(h, **assumptions, requests=d.requests, warmup=d.warmup, power=power, alpha=d.alpha,
                                block=d.sequential.block, at_least=design_cap or 0)
        print_anytime_plan(make_console(), h, any_plan, source, d)
        print_modes(make_console(), assumptions)
        return EXIT_OK
    rows = plan(h, **assumptions, requests=d.requests, warmup=d.warmup, power=power, alpha=d.alpha)
    console = make_console()
    print_plan(console, h, rows, power, source, d.requests, d.warmup, block=d.sequential.block,
               alpha=d.alpha)
    if source.startswith("assumptions from the twin"):
        refuted = [r.prediction for r in rows if r.target == "refuted"]
        console.print(f"the twin already expects {h.name} to be refuted on this deployment: {', '.join(refuted)}"
                      if refuted else f"the twin expects no prediction of {h.name} to be refuted on this deployment")
        print_twin_predictions(console, h, exp, resolved.backend.table, d)
        print_twin_assurance(console, h, exp, resolved.backend.table, d, assumptions, power)
    pilot_rows = read_trials(Path(kv["pilot"]) / "trials.jsonl") if "pilot" in kv else None
    print_fleet(make_console(), h, kv, d, assumptions, pilot_rows, power)
    print_modes(make_console(), assumptions)
    return EXIT_OK


def print_twin_predictions(console: Console, h: Hypothesis, exp: Experiment, row: Backend, d: Design) -> None:
    """The twin's prediction of the metric per condition with its 90% interval, each marked where the twin
    extrapolates or needs a parameter its pilot did not identify (the plan above takes the point predictions as
    exact; `print_twin_assurance` propagates their uncertainty)."""
    from framework.analysis.twinfit import mark

    preds = adapters.for_row(row).twin_predictions(h, exp, requests=d.requests, warmup=d.warmup) or {}
    for label, by_metric in preds.items():
        p = by_metric.get(h.metric) if isinstance(by_metric, dict) else None
        if not isinstance(p, dict):
            console.print(escape(f"  twin at {label}: {(by_metric or {}).get('not_predicted', 'not predicted')}"),
                          highlight=False)
            continue
        interval = (f" [{sig(p['low'], 4)}, {sig(p['high'], 4)}] (90%)" if p.get("low") is not None else "")
        words = mark(p)
        console.print(escape(f"  twin at {label}: {h.metric} {sig(p['mean'], 4)}{interval}"
                             + (f"; {words}" if words else "")), highlight=False)


def print_twin_assurance(console: Console, h: Hypothesis, exp: Experiment, row: Backend, d: Design,
                         assumptions: dict[str, Any], power: float) -> None:
    """The plan again with the twin's parameter uncertainty and misfit propagated (framework.analysis.
    twin_assurance): per prediction, how likely the truth implies each verdict, the launches that give `power`
    in `power` of the twin's draws, and the assurance and verdict probabilities there; or why it cannot."""
    from framework.analysis import twin_assurance as ta

    console.print(f"propagating the twin's uncertainty: {ta.DRAWS} draws of its parameters (seed {ta.SEED}) ...",
                  highlight=False)
    got = adapters.for_row(row).twin_plan_draws(h, exp, requests=d.requests, warmup=d.warmup)
    rows = ta.assurance(h, got["draws"], sd_launch_log=assumptions["sd_launch_log"],
                        sd_request_log=assumptions["sd_request_log"], requests=d.requests, power=power,
                        alpha=d.alpha, blocked=got["blocked"])
    table = Table(title=f"{h.name} with the twin's uncertainty: power {power} in {power:.0%} of its draws",
                  title_justify="left")
    for col in ("prediction", "truth implies supported", "launches/condition", "assurance", "P(supported)",
                "P(refuted)", "P(inconclusive)"):
        table.add_column(col)
    for r in rows:
        v = r.verdicts
        table.add_row(escape(r.prediction), f"{r.implied['supported']:.2f}" if r.implied else "-",
                      str(r.launches_per_condition or "-"), f"{r.assurance:.3f}" if r.assurance is not None else "-",
                      *(f"{v[k]:.3f}" if k in v else "-" for k in ("supported", "refuted", "inconclusive")))
    console.print(table)
    for r in rows:
        if r.note:
            console.print(escape(f"  {r.prediction}: {r.note}"), highlight=False)
    n = ta.launches_for_hypothesis(rows)
    console.print(escape(
        f"with the twin's uncertainty the whole hypothesis needs {n} launches per condition (design.launches={n})"
        if n else "with the twin's uncertainty the launches cannot be given (see the notes above): a pilot on the "
                  "deployment itself (pilot=RUN_DIR) plans from measured effects"), highlight=False)
    console.print("assurance: the probability of the verdict the truth implies, averaged over the twin's draws "
                  "(O'Hagan & Stevens 2001); its launch and request noise are taken as known "
                  "(docs/statistics.md, Planning with a twin's uncertainty)", highlight=False)


def print_modes(console: Console, assumptions: dict[str, Any]) -> None:
    """The launches a condition needs to see a launch mode of share p with probability 0.95 (statistics.md)."""
    prob = float(assumptions.get("slow_launch_prob") or 0.0)
    listed = ", ".join(f"{p:.0%} -> {n}" + (" (the assumed slow mode)" if p == prob else "")
                       for p, n in mode_shares(prob))
    console.print(escape(f"launch modes: a condition shows a mode of share p at least once with probability 0.95 "
                         f"from n = ceil(log 0.05 / log(1 - p)) launches: {listed}; under estimand mean a mode "
                         f"that no launch showed can move the verdict unseen, estimand typical is barely moved "
                         f"by it (docs/statistics.md, Estimands)"), highlight=False)


def _positive(kv: dict[str, str], key: str, kind: type) -> Any:
    if key not in kv:
        return None
    try:
        value = kind(kv[key])
    except ValueError:
        value = None
    least = 1 if kind is int else 0
    if value is None or value < least:
        raise ConfigError("command line", key, f"a {'whole number >= 1' if kind is int else 'number >= 0'} "
                          f"(got {kv[key]!r})")
    return value


def print_fleet(console: Console, h: Hypothesis, kv: dict[str, str], d: Design, assumptions: dict[str, Any],
                pilot_rows: list[dict[str, Any]] | None, power: float) -> None:
    """How many machines a claim about the fleet needs (framework.analysis.fleet), when a pilot or machine_sd=
    gives the machine-level noise."""
    machine_sd = _positive(kv, "machine_sd", float)
    per_machine = _positive(kv, "per_machine", int)
    if pilot_rows is None and machine_sd is None:
        console.print("machines: a claim about a fleet needs the machine-level noise: plan from a pilot on two or "
                      "more machines (pilot=RUN_DIR) or assume it (machine_sd=LOG_SD)", highlight=False)
        return
    noise = fleet.pilot_noise(h, pilot_rows) if pilot_rows is not None else {}
    n = per_machine or (fleet.launches_per_machine(h, pilot_rows) if pilot_rows is not None
                        else max(1, d.launches // max(1, d.machines)))
    sd_req = assumptions.get("sd_request_log") or {}
    req = sd_req if isinstance(sd_req, (int, float)) else (sum(sd_req.values()) / len(sd_req) if sd_req else 0.0)
    fallback = (assumptions.get("sd_launch_log") or 0.0) ** 2 + req ** 2 / max(1, d.requests)
    rows = fleet.plan_machines(h, means=assumptions["means"], noise=noise, n=n, power=power, alpha=d.alpha,
                               machine_sd=machine_sd, fallback_var_launch=fallback)
    table = Table(title=f"{h.name}: machines for a claim about the fleet (power {power:.2f}, {n} launch(es) per "
                  f"condition on each machine)", title_justify="left")
    for col in ("prediction", "kind", "assumed", "sd of effect between machines", "sd launch", "machines", "power"):
        table.add_column(col)
    for r in rows:
        table.add_row(escape(r.prediction), r.kind, f"{r.assumed_ratio:.3f}" if r.assumed_ratio else "-",
                      f"{r.sd_effect_machines:.4f}" if r.sd_effect_machines is not None else "not estimated",
                      f"{r.sd_launch:.4f}" if r.sd_launch is not None else "-",
                      str(r.machines) if r.machines else "-", f"{r.power:.2f}" if r.power else "-")
    console.print(table)
    for r in rows:
        if r.note:
            console.print(escape(f"  {r.prediction}: {r.note}"), highlight=False)
    source = f"machine_sd={machine_sd} (assumed)" if machine_sd is not None else "the pilot's machine-level contrasts"
    console.print(escape(f"machine-level noise from {source}; a verdict over m machines has m - 1 degrees of freedom "
                         "(docs/statistics.md, Machines)"), highlight=False)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return (f"{seconds / 3600:.1f} h" if seconds >= 3600
            else f"{seconds / 60:.1f} min" if seconds >= 60
            else f"{seconds:.0f} s")


MAX_PLAN_LOOKS = 10  # the sequential sizing's cost grows with the looks (n^2 at block 2: minutes at n = 64)


def sequential_block(fixed_launches: int, block: int) -> int:
    """The block `plan` sizes a sequential design with: the declared one, or the smallest that keeps the looks
    at MAX_PLAN_LOOKS or fewer (so plan finishes within seconds of printing its table at any n)."""
    return max(block, math.ceil(fixed_launches / MAX_PLAN_LOOKS))


def print_plan(console: Console, h: Hypothesis, rows: list[PlanRow], power: float, source: str,
               requests: int, warmup: int, block: int = 2, alpha: float | None = None) -> None:
    alpha = h.design.alpha if alpha is None else alpha
    table = Table(title=f"plan for {h.name}: power {power} at alpha {alpha} "
                        f"({requests} requests + {warmup} warm-up per launch)", title_justify="left")
    for col in ("prediction", "kind", "assumed ratio", "to be", "launches/condition", "total launches", "wall time"):
        table.add_column(col)
    for r in rows:
        table.add_row(escape(r.prediction), r.kind, "-" if r.assumed_effect is None else f"{r.assumed_effect:.3f}",
                      r.target or "-", str(r.launches_per_condition or "-"), str(r.total_launches or "-"),
                      _duration(r.expected_wall_s))
    console.print(table)
    for r in rows:
        if r.note:
            console.print(escape(f"  {r.prediction}: {r.note}"), highlight=False)
    n = launches_for_hypothesis(rows)
    console.print(f"whole hypothesis: {n if n is not None else 'not reachable'} launches per condition "
                  f"(design.launches={n})" if n else "whole hypothesis: see the notes above", highlight=False)
    if n:
        sized = sequential_block(n, block)
        cap = sequential_cap(n, sized, alpha)
        wider = (f" (blocks of {block} would make {math.ceil(n / block)} looks; plan sizes a sequential design of "
                 f"at most {MAX_PLAN_LOOKS} looks, whose boundaries' cost grows with the looks: run it with "
                 f"design.sequential.block={sized})" if sized != block else "")
        console.print(f"sequential (design.sequential=true): blocks of {sized} up to {cap} launches per condition "
                      f"({cap // sized} looks, inflation factor {inflation_factor(alpha, cap // sized):.3f} "
                      f"keeps the power of {n} fixed launches); it stops at the first look that decides every "
                      f"prediction{wider}", highlight=False)
    console.print(source, highlight=False)


def print_anytime_plan(console: Console, h: Hypothesis, p: AnytimePlan, source: str, d: Design) -> None:
    """The anytime plan: its cap, each prediction's power there, the expected launches (with MC errors)."""

    def se(q: float) -> float:
        return math.sqrt(max(q * (1 - q), 0.0) / p.sims)

    table = Table(title=f"plan for {h.name} under design.analysis=anytime: power {p.power} at alpha {d.alpha} "
                        f"({d.requests} requests + {d.warmup} warm-up per launch; a look after every block of "
                        f"{p.block}; {p.sims} simulated runs)", title_justify="left")
    for col in ("prediction", "kind", "assumed ratio", "to be", "cap it alone needs", "power at the plan's cap"):
        table.add_column(col)
    for r in p.rows:
        q = p.power_at_cap.get(r.prediction)
        table.add_row(escape(r.prediction), r.kind, "-" if r.assumed_effect is None else f"{r.assumed_effect:.3f}",
                      r.target or "-", str(r.launches_per_condition or "-"),
                      "-" if q is None else f"{q:.3f} ± {se(q):.3f}")
    console.print(table)
    for r in p.rows:
        if r.note:
            console.print(escape(f"  {r.prediction}: {r.note}"), highlight=False)
    if p.cap:
        hyp = (f"P(hypothesis {p.hypothesis_target}) = {p.hypothesis_power:.3f} ± {se(p.hypothesis_power):.3f}"
               if p.hypothesis_power is not None else "every prediction with a target at that power")
        console.print(f"whole hypothesis: cap {p.cap} launches per condition (run with design.sequential=true "
                      f"design.max_launches={p.cap}): "
                      f"{hyp}; it stops when every prediction is decided, after {p.expected_launches:.2f} ± "
                      f"{p.expected_launches_se:.2f} launches per condition on average "
                      f"(wall time {_duration(p.expected_wall_s)} expected, {_duration(p.max_wall_s)} at the cap)",
                      highlight=False)
        if p.note:
            console.print(escape(f"  note: {p.note}"), highlight=False)
    else:
        console.print(f"whole hypothesis: {p.note or 'see the notes above'}", highlight=False)
    curve = p.curve
    cap = d.sequential.max_launches if d.sequential.enabled else d.launches
    if curve is not None and cap:
        k = curve.at(cap)
        hyp = (f"P(hypothesis {p.hypothesis_target}) = {curve.hypothesis[k]:.3f} ± {se(curve.hypothesis[k]):.3f}"
               if curve.hypothesis and p.hypothesis_target else
               ", ".join(f"{i} {v[k]:.3f}" for i, v in curve.power.items() if not math.isnan(v[k])))
        if d.sequential.enabled:
            console.print(f"this design: sequential up to {cap} launches per condition: {hyp}, "
                          f"{curve.launches[k]:.2f} ± {curve.launches_se[k]:.2f} launches per condition on average",
                          highlight=False)
        else:
            console.print(f"this design: {cap} launches per condition, analysed once (design.sequential is off: "
                          f"the same power as a sequential run capped there, without stopping early): {hyp}",
                          highlight=False)
    console.print(f"left out, design.sequential.max_launches under analysis=anytime is "
                  f"{anytime_cap(d.launches, d.sequential.block, d.alpha)} for design.launches={d.launches} "
                  f"(docs/statistics.md section 10, 'The cap')", highlight=False)
    console.print("the fixed-design (Welch) and group-sequential figures do not apply under design.analysis=anytime: "
                  "its confidence sequences hold at every look, and are wider for it", highlight=False)
    console.print(source, highlight=False)
