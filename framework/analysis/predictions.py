"""Phase 3 of the analysis: each prediction decided on its own, at a given one-sided level.

A comparison (increase, decrease, equivalent, interaction) needs at least 2 launches with
measurements in each condition it compares, not too much lost, and some spread; then its effect on
the log scale (Welch, Hodges-Lehmann, bootstrap-t, or the anytime-valid block contrasts) goes
through the decision rule of `framework.stats.decisions`. A launch-outcome prediction counts its
launches (or, under `anytime`, tests its claimed rate). What a condition lost and which launches
lie outside Tukey's fences enter the reason, the latter with an exploratory re-analysis without them.
Whether the hypothesis as a whole is refuted is decided in `framework.analysis.verdicts`.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from framework.analysis import caveats, drift, machines, marks
from framework.analysis import outputs as outputs_analysis
from framework.analysis.launches import loss_text, losses
from framework.analysis.models import PredictionResult, Verdict
from framework.analysis.rows import ConditionData, GroupedRows
from framework.analysis.ruleset import RULESETS, RuleSet
from framework.core import evidence
from framework.core.design import Condition, matching
from framework.core.machine import UNKNOWN as UNKNOWN_MACHINE
from framework.core.machine import scope
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
from framework.core.vocabulary import ANALYSIS_METHODS
from framework.stats import anytime, anytime_machines, decisions, effects, shape

METHODS = ANALYSIS_METHODS
BOOTSTRAP_RESAMPLES = 4000
# A comparison whose condition lost more than this share of its launches (failed at start-up or
# served nothing; under rules version 2 also failed while measured) or of its measured requests
# (failed; under version 2 also ok but without a value of the metric) is inconclusive: the survivors
# may not represent the condition (docs/statistics.md, section 3, "What was lost").
LOSS_LIMIT = 0.2
# Zero observed spread (rules version 2): launch means that agree to the measurement's resolution
# (framework.stats.shape.RESOLUTION, one part in a million) have no measured spread.
SPREAD_FLOOR = shape.RESOLUTION


TYPICAL_UNDECIDABLE = ("the typical launch (estimand typical) has no machine-level or anytime-valid test: decide it "
                       "on one machine under a fixed design, or use estimand mean")
# What a verdict under each estimand covers and what no test at these launch counts can see (rules v4: said
# once, in details.estimand, not as a mark; docs/statistics.md, "Estimands")
COVERS = {
    "mean": ("the ratio of geometric means over launches; a launch mode that none of the n launches showed can "
             "move it, and n launches see a mode of share p with probability 0.95 only when "
             "n >= log 0.05 / log(1 - p) (plan prints it)"),
    "typical": ("the typical launch: the Hodges-Lehmann shift of log launch values (the median of the pairwise "
                "differences), which a mode of small share moves by little; it says nothing about the mean "
                "over launches"),
}


def _seed(seed: int, pid: str) -> list[int]:
    """Bootstrap seed: the run's effective design seed (as recorded) and the prediction id."""
    return [int(seed), zlib.crc32(pid.encode("utf-8"))]


def _need(data: dict[int, ConditionData], cells: list[Condition], exclude: frozenset[str],
          ruleset: RuleSet = RULESETS[1]) -> str | None:
    """Why these conditions cannot be compared (too few launches, too much lost, no spread), or None."""
    for c in cells:
        ids, logs = data[c.index].logs(exclude)
        if len(ids) < 2:
            d = data[c.index]
            ok = sum(1 for r in d.launch_rows if r.get("ok"))
            failed = len(d.launch_rows) - ok
            loss = losses(d)
            why = f" ({loss_text(c, loss)})" if "requests_lost" in loss and (failed or loss["requests_lost"]) else ""
            return (f"condition {c.label()} has {len(ids)} launch(es) with measurements "
                    f"({ok} ok, {failed} failed); at least 2 are needed{why}")
        loss = losses(data[c.index])
        if loss["lost_share"] > LOSS_LIMIT or loss.get("requests_lost_share", loss["censored_share"]) > LOSS_LIMIT:
            return (f"{loss_text(c, loss)}: more than {LOSS_LIMIT:.0%} lost, so the survivors may not "
                    f"represent the condition (survivorship); no verdict is drawn from them")
        floor = SPREAD_FLOOR if ruleset.spread_floor else 1e-12 * max(1.0, abs(max(logs)))
        if max(logs) - min(logs) <= floor:
            return (f"condition {c.label()}: all {len(ids)} launches have the same mean (zero observed spread), "
                    f"so the interval would have zero width; a metric that does not vary between launches "
                    f"was not measured (constant or cached answers), and no verdict is drawn from it")
    return None


def _loss_note(data: dict[int, ConditionData], cells: list[Condition]) -> str:
    """What the compared conditions lost, in words, for the reason ('' when nothing was lost)."""
    notes = [loss_text(c, loss) for c in cells
             if (loss := losses(data[c.index]))["failed"] or loss["without_data"] or loss["censored"]
             or loss.get("unmeasured")]
    return "; ".join(notes)


def _one(h: Hypothesis, conds: list[Condition], where: dict[str, str]) -> Condition:
    """The one condition `where` selects (a comparison's cell); a spec that selects more or none is an error."""
    found = matching(conds, where)
    if len(found) != 1:
        raise ValueError(f"where {where} selects {len(found)} conditions, expected 1")
    return found[0]


def decide(h: Hypothesis, p: Any, data: dict[int, ConditionData], conds: list[Condition], a: float, method: str,
           exclude: frozenset[str] = frozenset(), seed: int = 0, ruleset: RuleSet = RULESETS[1]
           ) -> tuple[decisions.Decision, list[Condition]]:
    """The decision of one comparison prediction at one-sided level `a`, optionally without some launches."""
    if isinstance(p, Interaction):
        ref = h.factors[p.factor].reference
        by_ref = effective_reference(h, p)
        keys = [(p.level, p.by_level), (ref, p.by_level), (p.level, by_ref), (ref, by_ref)]
        cells = [_one(h, conds, {**p.where, p.factor: f, p.by: b}) for f, b in keys]
        missing = _need(data, cells, exclude, ruleset)
        if missing:
            return decisions.Decision("inconclusive", missing), cells
        logs = {k: data[c.index].logs(exclude)[1] for k, c in zip(keys, cells, strict=True)}
        fleet = _fleet(data, cells, [1, -1, -1, 1], exclude, method, ruleset)
        if isinstance(fleet, decisions.Decision):
            return fleet, cells
        if fleet is not None:
            return decisions.interaction(fleet, p.min_effect, p.direction, a), cells
        if method == "anytime":
            eff_any, why = _anytime_effect([data[c.index].by_block(exclude) for c in cells], [1, -1, -1, 1])
            if eff_any is None:
                return decisions.Decision("inconclusive", why), cells
            return decisions.interaction(eff_any, p.min_effect, p.direction, a), cells
        if method == "welch":
            eff: effects.LogEffect = effects.interaction_ols(logs, p.factor, ref, p.level, p.by, by_ref, p.by_level)
        else:  # the rank method has no standard interaction test: both robust methods use bootstrap-t
            eff = effects.bootstrap_t([logs[k] for k in keys], [1, -1, -1, 1], seed=_seed(seed, p.id),
                                      resamples=BOOTSTRAP_RESAMPLES)
        return decisions.interaction(eff, p.min_effect, p.direction, a), cells
    ref = h.factors[p.factor].reference
    treat = _one(h, conds, {**p.where, p.factor: p.level})
    base = _one(h, conds, {**p.where, p.factor: ref})
    cells = [treat, base]
    missing = _need(data, cells, exclude, ruleset)
    if missing:
        return decisions.Decision("inconclusive", missing), cells
    x = data[treat.index].logs(exclude)[1]
    y = data[base.index].logs(exclude)[1]
    fleet = _fleet(data, cells, [1, -1], exclude, method, ruleset)
    if isinstance(fleet, decisions.Decision):
        return fleet, cells
    typical = getattr(p, "estimand", "mean") == "typical"
    if typical and (fleet is not None or method == "anytime"):
        return decisions.Decision("inconclusive", TYPICAL_UNDECIDABLE), cells
    if typical:  # the typical launch: Hodges-Lehmann shift, Moses interval, Mann-Whitney test (any fixed method)
        eff: effects.LogEffect = effects.hodges_lehmann(x, y)
    elif fleet is not None:
        eff = fleet
    elif method == "anytime":
        eff_any, why = _anytime_effect([data[treat.index].by_block(exclude), data[base.index].by_block(exclude)],
                                       [1, -1])
        if eff_any is None:
            return decisions.Decision("inconclusive", why), cells
        eff = eff_any
    elif method == "welch":
        eff = effects.welch(x, y)
    elif method == "rank":
        eff = effects.hodges_lehmann(x, y)
    else:
        eff = effects.bootstrap_t([x, y], [1, -1], seed=_seed(seed, p.id), resamples=BOOTSTRAP_RESAMPLES)
    if isinstance(p, Equivalent):
        return decisions.equivalent(eff, p.margin, a), cells
    if isinstance(p, Increase):
        return decisions.increase(eff, p.min_effect, a), cells
    assert isinstance(p, Decrease)
    return decisions.decrease(eff, p.min_effect, a), cells


def _fleet(data: dict[int, ConditionData], cells: list[Condition], weights: list[int], exclude: frozenset[str],
           method: str, ruleset: RuleSet
           ) -> effects.TEffect | anytime_machines.MachineSequence | decisions.Decision | None:
    """Under rules version 3, the machine-level effect of cells whose launches ran on two or more machines
    (framework.analysis.machines), or an inconclusive decision when the machine and the condition are
    confounded; None when the launches ran on one machine (or under anytime: its block contrasts are
    taken as they come, unless rules version 4's `anytime_machines` takes the machine as the unit there too),
    so the analysis is exactly the one-machine one."""
    if not ruleset.machine_effect or len(machines.machines_of(data, cells, exclude)) < 2:
        return None
    if method == "anytime" and not ruleset.anytime_machines:  # rules version 3: block contrasts as they come
        return None
    find = machines.anytime_effect if method == "anytime" else machines.effect
    eff, why, details = find(data, cells, weights, exclude)
    if eff is None:
        return decisions.Decision("inconclusive", why, details={"machine": details})
    return eff


def _anytime_effect(cells: list[dict[Any, float]], weights: list[int]) -> tuple[Any, str]:
    """The anytime-valid effect of the blocks every cell completed, or None and why not."""
    contrasts, blocks = anytime.block_contrasts(cells, weights)
    if len(contrasts) < 2:
        return None, (f"{len(contrasts)} block(s) with a measured launch in every condition compared; "
                      f"the anytime analysis needs at least 2")
    return anytime.AnytimeEffect(contrasts, extra={"block_ids": [str(b) for b in blocks]}), ""


def decide_launches(p: Launches, data: dict[int, ConditionData], conds: list[Condition], a: float | None = None
                    ) -> decisions.Decision:
    """Launch outcomes of the matching conditions: counted, or under `anytime` (`a` given) a test of `p.rate`.

    Outcomes go in block order (replicate, then condition), so that the anytime rule's looks, the
    ends of blocks, are prefixes of the run's own sequence of launches.
    """
    outcomes = []
    for c in matching(conds, p.where):
        d = data[c.index]
        for i, r in enumerate(d.launch_rows):
            ok = bool(r.get("ok")) and d.served.get(r["launch_id"], True)
            err = r.get("error")
            if r.get("ok") and not ok:
                err = "started but served no request"
            after = d.served_requests.get(r["launch_id"], 0) if r.get("failed_while_measured") else None
            outcomes.append(decisions.LaunchOutcome(r["launch_id"], ok, err, tuple(r.get("log_tail") or ()),
                                                    r.get("failure_class"), r.get("replicate", i), after))
    if a is not None:
        outcomes.sort(key=lambda o: (str(type(o.block)), o.block))  # stable: conditions stay in order
    return decisions.launches(outcomes, p.expect, p.match, p.failure_class, rate=p.rate, a=a)


def _finite_ci(ci: tuple[float, float] | None) -> list[float] | None:
    """The interval as the record stores it: None when unbounded, so that the record is strict JSON."""
    if ci is None or not all(math.isfinite(v) for v in ci):
        return None
    return [float(ci[0]), float(ci[1])]


def launches_result(p: Launches, rows: GroupedRows, a: float | None) -> PredictionResult:
    """A launch-outcome prediction's result: counted, or under `anytime` (`a` given) tested."""
    conds, empty = rows.conditions, rows.empty
    dec = decide_launches(p, rows.data, conds, a)
    verdict, reason = evidence.capped(dec.verdict, dec.reason,
                                      [empty[c.index] for c in matching(conds, p.where) if c.index in empty])
    det = dict(dec.details)
    if dec.p_value is not None:
        det["p_anytime"] = dec.p_value  # valid under any stopping: the sweep adjusts this one
    return PredictionResult(id=p.id, kind=p.kind, verdict=verdict, estimate=dec.estimate,
                            ci=_finite_ci(dec.ci), p_value=dec.p_value, reason=reason, details=det)


def comparison_result(h: Hypothesis, p: Any, rows: GroupedRows, flagged: dict[int, list[str]], a: float,
                      method: str, seed: int, ruleset: RuleSet = RULESETS[1]) -> PredictionResult:
    """A comparison's result: its decision, what its conditions lost, and the outliers' exploratory re-analysis."""
    data, conds, empty = rows.data, rows.conditions, rows.empty
    dec, cells = decide(h, p, data, conds, a, method, seed=seed, ruleset=ruleset)
    found_drift = None
    if ruleset.drift_check and "log_ci" in dec.details:  # a decision from an effect, not a missing-data reason
        dec, found_drift = drift.apply(dec, drift.contrasts_of(data, cells), a)
    estimand = getattr(p, "estimand", "mean")
    if ruleset.informative_marks:
        notes = marks.marks(dec, cells, data)
    else:
        notes = caveats.caveats(dec, cells, data, a, method) if ruleset.caveats else []
    typical = estimand == "typical" and "log_ci" in dec.details  # a decision from the effect, not a missing-data one
    reason = ("the typical launch (Hodges-Lehmann shift): " if typical else "") + dec.reason
    det = dict(dec.details)
    if ruleset.informative_marks:
        det["estimand"] = {"name": estimand, "covers": COVERS[estimand]}
    elif estimand != "mean":
        det["estimand"] = {"name": estimand}
    if found_drift is not None:
        det["drift"] = found_drift
    mach = det.get("machine") if isinstance(det.get("machine"), dict) else None
    if mach and mach.get("machine_effects"):  # the next machine, beside the interval for these machines' mean
        det["new_machine"] = machines.new_machine(mach["machine_effects"], a)
    if notes:
        det["caveats"] = notes
        reason += "; caveat: " + "; caveat: ".join(n["text"] for n in notes)
    if method == "anytime" and dec.p_value is not None:
        det["p_anytime"] = dec.p_value  # valid under any stopping: the sweep adjusts this one
    if ruleset.machine_effect:  # the population the verdict covers (framework.analysis.machines)
        on = machines.machines_of(data, cells)
        det["population"] = scope(len(on))
        if len(on) > 1 and method == "anytime" and not ruleset.anytime_machines:
            det["population"] += " (the anytime block contrasts do not model the machine)"
    lost = _loss_note(data, cells)
    if lost and not reason.startswith("condition "):
        reason += f"; {lost}"
    if lost:
        det["losses"] = {c.label(): losses(data[c.index]) for c in cells}
    out = frozenset(i for c in cells for i in flagged[c.index])
    if out:
        alt, _ = decide(h, p, data, conds, a, method, exclude=out, seed=seed, ruleset=ruleset)
        det["sensitivity"] = {"exploratory": True, "without_launches": sorted(out), "verdict": alt.verdict,
                              "reason": alt.reason,
                              "note": "a look after the data, not a test: its error rate is not controlled"}
        names = ", ".join(sorted(out))
        reason += (f"; launch(es) {names} outside Tukey's fences (flagged for inspection only: the verdict "
                   f"uses every launch; an exploratory re-analysis without them is in details.sensitivity)")
    verdict, reason = evidence.capped(dec.verdict, reason, [empty[c.index] for c in cells if c.index in empty])
    return PredictionResult(id=p.id, kind=p.kind, verdict=verdict, estimate=dec.estimate,
                            ci=_finite_ci(dec.ci), p_value=dec.p_value, reason=reason, details=det)


def _launch_population(rows: GroupedRows, p: Launches) -> str:
    """The machines a launch-outcome prediction's launches ran on, in words."""
    on = {rows.data[c.index].machines.get(r["launch_id"], UNKNOWN_MACHINE)
          for c in matching(rows.conditions, p.where) for r in rows.data[c.index].launch_rows}
    return scope(len(on))


def decide_predictions(h: Hypothesis, rows: GroupedRows, flagged: dict[int, list[str]], a: float, method: str,
                       seed: int, ruleset: RuleSet = RULESETS[1]
                       ) -> tuple[list[PredictionResult], list[tuple[Any, Verdict]]]:
    """Every prediction's result, in the file's order, and the (prediction, verdict) of those that are tests.

    Comparisons are always tests; launch-outcome predictions only under `anytime` (a p-value),
    otherwise counts. The tests are what the hypothesis-level refutation rule counts.
    """
    results: list[PredictionResult] = []
    tests: list[tuple[Any, Verdict]] = []
    for p in h.predictions:
        if isinstance(p, Launches):
            r = launches_result(p, rows, a if method == "anytime" else None)
            if ruleset.machine_effect:
                r.details["population"] = _launch_population(rows, p)
            if r.p_value is not None:
                tests.append((p, r.verdict))
        elif isinstance(p, Outputs):  # generated tokens compared, not the metric (analysis/outputs.py)
            r = outputs_analysis.result(h, p, rows, a, ruleset)
            tests.append((p, r.verdict))
        else:
            r = comparison_result(h, p, rows, flagged, a, method, seed, ruleset)
            tests.append((p, r.verdict))
        results.append(r)
    return results, tests
