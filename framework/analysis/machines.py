"""The machine as a random effect (rules version 3, `RuleSet.machine_effect`): launches within machines.

An effect measured on one machine is a statement about that machine: the launches of one machine
share its offsets, and the effect itself can differ between machines of the same kind (issue 26:
the cuda-graphs speed-up was 5.65x on one H200 and 4.25x on the next). So a verdict says which
population it covers (`population`): "this machine" when its launches ran on one, "N machines" when
they ran on several, and then the comparison is made on machine-level contrasts.

The model (docs/statistics.md, "Machines"), on the log scale, for launch k of cell c on machine j:
    y_cjk = mu_c + b_j + g_cj + e_cjk,   b_j ~ (0, s_m^2), g_cj ~ (0, s_g^2), e_cjk ~ (0, s_l^2).
A prediction's contrast sum_c w_c mu_c (w = [1, -1] for a comparison, [1, -1, -1, 1] for an
interaction) is estimated per machine from the machine's cell means, d_j = sum_c w_c ybar_cj (the
machine's own b_j cancels), and the fleet's from the m machines' d_j by their mean and a t interval
with m - 1 degrees of freedom: se = sd(d_j) / sqrt(m) (the analysis of cluster-level summaries:
Murray 1998, ch. 9; for a balanced design it equals the REML fixed effect of a mixed model with a
random machine intercept and a random machine-by-condition term, statsmodels MixedLM, which
tests/analysis/test_machines.py cross-checks). Var(d_j) = tau^2 + s_l^2 sum_c w_c^2 / n_cj, where
tau^2 = s_g^2 sum_c w_c^2 is how much the effect itself moves between machines (the variance of the
machines' true contrasts); tau^2 is estimated by moments, s_d^2 - s_l^2 mean_j(sum_c w_c^2 / n_cj),
truncated at 0 (`var_effect_between_machines`); a
zero estimate is at the boundary of the parameter space: the data cannot tell a small machine effect
from none, and the record says "not estimated (at the boundary)", never "no machine effect".
With two machines, t(0.95, 1) = 6.31: the interval is wide, which is what two machines can say.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from framework.analysis.rows import ConditionData
from framework.core.design import Condition
from framework.core.machine import scope
from framework.stats import anytime_machines, effects, prediction, variance

BOUNDARY = "not estimated (at the boundary: the machine-level variance estimate is 0, which is not 'no machine effect')"


def cell_machines(data: dict[int, ConditionData], cells: list[Condition],
                  exclude: frozenset[str] = frozenset()) -> list[dict[str, list[float]]]:
    """Per cell, {machine id: log launch values of its launches on that machine}."""
    out = []
    for c in cells:
        d = data[c.index]
        ids, logs = d.logs(exclude)
        by: dict[str, list[float]] = {}
        for i, v in zip(ids, logs, strict=True):
            by.setdefault(d.machines.get(i, "unknown"), []).append(v)
        out.append(by)
    return out


def machines_of(data: dict[int, ConditionData], cells: list[Condition], exclude: frozenset[str] = frozenset()
                ) -> list[str]:
    """The machines the cells' measured launches ran on, sorted."""
    return sorted({m for by in cell_machines(data, cells, exclude) for m in by})


def effect(data: dict[int, ConditionData], cells: list[Condition], weights: Sequence[float],
           exclude: frozenset[str] = frozenset()) -> tuple[effects.TEffect | None, str, dict[str, Any]]:
    """The machine-level contrast over the machines that measured every cell: (effect, '', details), or
    (None, why not, details) when fewer than 2 machines measured every cell."""
    by = cell_machines(data, cells, exclude)
    every = sorted(set.intersection(*(set(b) for b in by))) if by else []
    seen = sorted({m for b in by for m in b})
    partial = [m for m in seen if m not in every]
    details: dict[str, Any] = {"machines": len(seen), "machines_with_every_cell": len(every),
                               "launches_by_machine": {m: sum(len(b.get(m, [])) for b in by) for m in seen}}
    if partial:
        details["machines_left_out"] = partial
    if len(every) < 2:
        why = (f"the compared conditions ran on {len(seen)} machines, but only {len(every)} measured every one of "
               "them: the machine and the condition are confounded, so no fleet-level contrast can be made")
        return None, why, details
    d = np.array([sum(w * float(np.mean(b[m])) for w, b in zip(weights, by, strict=True)) for m in every])
    m = len(every)
    sd = float(np.std(d, ddof=1))
    if sd <= 0:
        return None, (f"the {m} machines' contrasts agree exactly (zero spread between machines), so the "
                      "interval would have zero width; no fleet-level verdict is drawn from it"), details
    est = float(np.mean(d))
    # the launch-level variance within machine and cell, pooled over cells and machines (its df)
    groups = [b[mach] for b in by for mach in every]
    ss = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups)
    df_l = sum(len(g) - 1 for g in groups)
    var_l = ss / df_l if df_l > 0 else None
    w2_over_n = [sum(w * w / len(b[mach]) for w, b in zip(weights, by, strict=True)) for mach in every]
    var_g = None if var_l is None else sd * sd - var_l * float(np.mean(w2_over_n))
    details.update({
        "unit": "machine", "estimator": "machine means: t on the per-machine contrasts, m - 1 df",
        "machine_effects": {mach: float(x) for mach, x in zip(every, d, strict=True)},
        "df": m - 1, "var_launch": var_l,
        "var_effect_between_machines": None if var_g is None else max(0.0, var_g),
        "machine_variance": BOUNDARY if var_g is not None and var_g <= 0 else (
            "not estimated (no launch-level replication within a machine and condition)" if var_g is None
            else "estimated"),
    })
    eff = effects.TEffect(est, sd / math.sqrt(m), float(m - 1), "machine_means", extra={"machine": details})
    return eff, "", details


def anytime_effect(data: dict[int, ConditionData], cells: list[Condition], weights: Sequence[float],
                   exclude: frozenset[str] = frozenset()
                   ) -> tuple[anytime_machines.MachineSequence | None, str, dict[str, Any]]:
    """Under `analysis: anytime` (rules version 4, `anytime_machines`), the fleet's confidence sequence with the
    machine as the unit (framework.stats.anytime_machines): (effect, '', details), or (None, why not, details)
    when fewer than 2 machines completed a block of every cell."""
    keyed = []
    for c in cells:
        d = data[c.index]
        ids, logs = d.logs(exclude)
        block = {r["launch_id"]: r.get("replicate", i) for i, r in enumerate(d.launch_rows)}
        keyed.append({(d.machines.get(i, "unknown"), block[i]): v for i, v in zip(ids, logs, strict=True)})
    by = anytime_machines.machine_block_contrasts(keyed, weights)
    seen = sorted({mach for k in keyed for mach, _ in k})
    details: dict[str, Any] = {"machines": len(seen), "machines_with_every_cell": len(by),
                               "blocks_by_machine": {mach: len(v) for mach, v in sorted(by.items())}}
    if len(by) < 2:
        why = (f"the compared conditions ran on {len(seen)} machines, but only {len(by)} completed a block of every "
               "one of them: the anytime analysis takes the machine as its unit and needs at least 2")
        return None, why, details
    eff = anytime_machines.MachineSequence(by)
    details.update({"unit": "machine", "rounds": eff.rounds, "machine_effects": eff.extra["machine_effects"],
                    "estimator": "machine means at each round: t on m - 1 df, round k at level a * 6/(pi^2 k^2)"})
    eff.extra["machine"] = details
    return eff, "", details


def new_machine(machine_effects: dict[str, float], a: float) -> dict[str, Any]:
    """The 1 - 2a prediction interval for the next machine's effect (framework.stats.prediction), for the record:
    log and ratio scale, its degrees of freedom, whether it is useful and how many machines a useful one needs."""
    pi = prediction.new_unit(list(machine_effects.values()), a)
    out: dict[str, Any] = {"level": pi.level, "machines": pi.units, "df": pi.df, "useful": pi.useful,
                           "machines_for_useful": pi.units_needed, "note": pi.note,
                           "method": "mean +- t(m-1) s sqrt(1 + 1/m) on the machines' log contrasts"}
    if pi.low is not None and pi.high is not None:
        out.update({"log_interval": [pi.low, pi.high], "interval": [math.exp(pi.low), math.exp(pi.high)],
                    "width_factor": pi.factor})
    return out


def level_variance(data: dict[int, ConditionData]) -> dict[str, Any]:
    """The machine-level variance of the metric itself (b_j: a machine is faster at everything), pooled over
    conditions: the one-way random-effects ANOVA of launch log values grouped by machine within condition."""
    per_condition = []
    for d in data.values():
        ids, logs = d.logs()
        by: dict[str, list[float]] = {}
        for i, v in zip(ids, logs, strict=True):
            by.setdefault(d.machines.get(i, "unknown"), []).append(v)
        per_condition.append(list(by.values()))
    comp = variance.pooled_components(per_condition)
    out = {"machines": len({m for d in data.values() for m in d.machines.values()}),
           "var_machine": comp.var_between, "var_launch": comp.var_within, "icc_machine": comp.icc}
    if comp.var_between is not None and comp.var_between <= 0 and comp.ms_between is not None:
        out["var_machine_note"] = BOUNDARY
    return out


def population(data: dict[int, ConditionData]) -> dict[str, Any]:
    """What a verdict covers: the machines its measured launches ran on ("this machine" or "N machines")."""
    launches: dict[str, int] = {}
    for d in data.values():
        ids, _ = d.means()
        for i in ids:
            m = d.machines.get(i, "unknown")
            launches[m] = launches.get(m, 0) + 1
    out = {"scope": scope(len(launches)), "machines": len(launches),
           "launches_by_machine": dict(sorted(launches.items()))}
    if any(d.rules.machine_by_hardware for d in data.values()):
        out.update(names(data))
    return out


def names(data: dict[int, ConditionData]) -> dict[str, Any]:
    """Under `RuleSet.machine_by_hardware` (rules version 4): the labels each machine's launches gave it. A
    label names a machine and does not make one, so a machine known by two labels is said to be one, and
    why: `{"labels_by_machine": {id: [labels]}, "labels_note": ...}`; nothing when no launch has a label."""
    by: dict[str, set[str]] = {}
    for d in data.values():
        ids, _ = d.means()
        measured = set(ids)
        for r in d.launch_rows:
            own = r.get("machine")
            if r["launch_id"] in measured and isinstance(own, dict) and own.get("label"):
                by.setdefault(d.machines.get(r["launch_id"], "unknown"), set()).add(str(own["label"]))
    if not by:
        return {}
    out: dict[str, Any] = {"labels_by_machine": {m: sorted(v) for m, v in sorted(by.items())}}
    shared = {m: sorted(v) for m, v in sorted(by.items()) if len(v) > 1}
    if shared:
        out["labels_note"] = "; ".join(
            f"labels {', '.join(v)} name one machine ({m}: the same host, CPU and GPUs), counted once"
            for m, v in shared.items())
    return out
