"""How many machines a claim about a fleet needs: the machine-level power of rules version 3.

A comparison over m machines is decided on the m per-machine contrasts d_j (framework.analysis.machines):
est = mean d_j, se = sd(d_j) / sqrt(m), a t interval with m - 1 df. Each d_j has variance
    V = tau^2 + sum(w^2) * s_l^2 / n
(tau^2: how much the effect moves between machines, s_l^2: the launch-level variance within a machine,
n: launches per condition on each machine), so the plan simulates the sufficient statistics
(mean ~ N(effect, V / m), s^2 ~ V chi2(m - 1) / (m - 1)) through the decision rule, as
framework.analysis.planning does for launches (docs/statistics.md, "Machines"). More launches per
machine only shrink the s_l^2 / n part: past a point, only more machines narrow a fleet's interval.
A pilot on one machine cannot estimate tau^2; the plan then needs it assumed (`machine_sd=`: tau, the
sd of the log effect between machines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from framework.analysis import machines
from framework.analysis.planning import Comparison, comparison, smallest_with_power
from framework.analysis.rows import group_rows
from framework.analysis.ruleset import RULESETS
from framework.core.design import conditions
from framework.core.spec import Hypothesis, Launches

MAX_MACHINES = 200
DRAWS = 20000


def power_machines(comp: Comparison, *, m: int, var_effect: float, var_launch: float, n: int, a: float,
                   draws: int = DRAWS, seed: int = 0) -> float:
    """Probability that the machine-level rule returns the comparison's target with m machines, n launches per
    condition on each."""
    from scipy import special

    if m < 2 or comp.target is None:
        return 0.0
    w2 = float(sum(w * w for w in comp.weights))
    v = var_effect + w2 * var_launch / n
    rng = np.random.default_rng([seed, m, n])
    est = comp.effect_log + rng.normal(0.0, 1.0, draws) * math.sqrt(v / m)
    se = np.sqrt(v * rng.chisquare(m - 1, draws) / (m - 1) / m)
    q = float(special.stdtrit(m - 1, 1 - a))
    lo, hi = est - q * se, est + q * se
    if comp.rule == "up":
        hit = (lo > comp.low) if comp.target == "supported" else (hi < comp.low)
    elif comp.rule == "down":
        hit = (hi < comp.high) if comp.target == "supported" else (lo > comp.high)
    else:
        hit = (((lo > comp.low) & (hi < comp.high)) if comp.target == "supported"
               else ((hi < comp.low) | (lo > comp.high)))
    return float(np.mean(hit))


def machines_needed(comp: Comparison, *, var_effect: float, var_launch: float, n: int, a: float, power: float,
                    max_m: int = MAX_MACHINES) -> tuple[int | None, float]:
    """The fewest machines (>= 2) with power >= `power` (power grows with m: a bisection), or None and the power
    at `max_m`."""
    def pw(m: int) -> float:
        return power_machines(comp, m=m, var_effect=var_effect, var_launch=var_launch, n=n, a=a)

    return smallest_with_power(pw, 2, max_m, power)


@dataclass(frozen=True)
class FleetRow:
    prediction: str
    kind: str
    assumed_ratio: float | None
    sd_effect_machines: float | None  # tau: the sd of the log effect between machines
    sd_launch: float | None
    machines: int | None
    power: float | None
    note: str = ""


def pilot_noise(h: Hypothesis, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The pilot's machine-level noise per comparison: {prediction id: {machines, var_effect, var_launch,
    effect_log}} (var_effect None when the pilot ran on one machine, at the boundary when it estimates 0)."""
    grouped = group_rows(h, rows, RULESETS[3])
    conds = grouped.conditions
    out: dict[str, Any] = {}
    for p in h.predictions:
        if isinstance(p, Launches):
            continue
        c = comparison(h, p, {i: 1.0 for i in range(len(conds))})
        if isinstance(c, str):
            continue
        cells = [conds[i] for i in c.cells]
        on = machines.machines_of(grouped.data, cells)
        eff, why, det = machines.effect(grouped.data, cells, c.weights) if len(on) >= 2 else (None, "", {})
        var_l = det.get("var_launch") if eff is not None else _launch_var(grouped.data, cells)
        out[p.id] = {"machines": len(on), "var_effect": det.get("var_effect_between_machines"),
                     "var_launch": var_l, "effect_log": eff.estimate if eff is not None else None,
                     "boundary": det.get("machine_variance") == machines.BOUNDARY, "why": why}
    return out


def _launch_var(data: dict[int, Any], cells: list[Any]) -> float | None:
    """The pooled launch-level variance of the cells' log launch values (one machine)."""
    ss, df = 0.0, 0
    for c in cells:
        _, logs = data[c.index].logs()
        if len(logs) >= 2:
            x = np.asarray(logs)
            ss += float(np.sum((x - x.mean()) ** 2))
            df += len(logs) - 1
    return ss / df if df else None


def plan_machines(h: Hypothesis, *, means: dict[int, float], noise: dict[str, Any], n: int, power: float,
                  alpha: float, machine_sd: float | None = None,
                  fallback_var_launch: float | None = None) -> list[FleetRow]:
    """Machines needed per comparison prediction for a claim about the fleet, at n launches per condition per
    machine, from the pilot's means and machine-level noise (or `machine_sd`, an assumed sd of the effect
    between machines on the log scale, which replaces the pilot's; `fallback_var_launch`: the launch-level
    variance where the noise has none, e.g. the simulator's model without a pilot)."""
    rows = []
    for p in h.predictions:
        if isinstance(p, Launches):
            continue
        c = comparison(h, p, means)
        if isinstance(c, str):
            rows.append(FleetRow(p.id, p.kind, None, None, None, None, None, c))
            continue
        nz = noise.get(p.id) or {}
        var_l = nz.get("var_launch", fallback_var_launch)
        var_g = machine_sd ** 2 if machine_sd is not None else nz.get("var_effect")
        ratio = math.exp(c.effect_log)
        if var_l is None:
            rows.append(FleetRow(p.id, p.kind, ratio, None, None, None, None,
                                 "the pilot has no launch-level spread to plan from"))
            continue
        if var_g is None:
            rows.append(FleetRow(p.id, p.kind, ratio, None, math.sqrt(var_l), None, None,
                                 "the pilot ran on one machine, which cannot estimate how much the effect moves "
                                 "between machines: pilot on two or more (design.machines, machine.slot) or "
                                 "assume it with machine_sd="))
            continue
        if c.target is None:
            rows.append(FleetRow(p.id, p.kind, ratio, math.sqrt(var_g), math.sqrt(var_l), None, None,
                                 "assumed effect sits on the threshold: no number of machines decides it"))
            continue
        m, pw = machines_needed(c, var_effect=var_g, var_launch=var_l, n=n, a=alpha, power=power)
        note = ""
        if machine_sd is None and nz.get("boundary"):
            note = ("the pilot's machine-level variance is at the boundary (estimated 0, not 'no machine effect'): "
                    "this count is a floor; assume one with machine_sd= to see its cost")
        elif machine_sd is None and nz.get("machines", 0) <= 3:
            note = (f"the machine-level sd comes from {nz.get('machines')} machines ({nz.get('machines', 1) - 1} df): "
                    "it is itself very uncertain")
        if h.design.analysis == "anytime":  # rules version 4 decides anytime designs on the machine sequence
            note = ("planned for the fixed-sample machine-means rule; under analysis: anytime the machine-level "
                    "confidence sequence spends alpha over rounds (a * 6/(pi^2 k^2)) and needs more machines"
                    + (f"; {note}" if note else ""))
        if m is None:
            note = (f"not reachable with {MAX_MACHINES} machines (power {pw:.2f})" + (f"; {note}" if note else ""))
        rows.append(FleetRow(p.id, p.kind, ratio, math.sqrt(var_g), math.sqrt(var_l), m, pw if m else None, note))
    return rows


def launches_per_machine(h: Hypothesis, rows: Iterable[dict[str, Any]]) -> int:
    """Launches per condition on each machine in a pilot (the smallest), at least 1."""
    grouped = group_rows(h, rows, RULESETS[3])
    counts = []
    for c in conditions(h):
        d = grouped.data[c.index]
        per: dict[str, int] = {}
        for i in d.means()[0]:
            per[d.machines.get(i, "")] = per.get(d.machines.get(i, ""), 0) + 1
        counts += list(per.values())
    return max(1, min(counts)) if counts else 1

