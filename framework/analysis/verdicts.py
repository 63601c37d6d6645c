"""From raw trial rows to per-prediction verdicts: the pure analysis every run and every audit uses.

`analyze(h, rows)` reads nothing and writes nothing: it takes the hypothesis as registered and the
rows of a trials file (dicts as written, see `framework.records.trials`) and returns an `Analysis`.
The run calls it once at the end (or `sequential_look` at every look, for sequential designs);
`audit` calls it again on the stored file and compares.

The unit of replication is the launch: a launch's metric is the mean over its measured requests
(not warm-up, ok), and every comparison works on the log of those per-launch values. The decision
rules are in `framework.stats.decisions`, the formulas and references in docs/statistics.md.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Iterable

from framework.analysis.launches import condition_summary, launch_stats, loss_text, losses, variance_report
from framework.analysis.models import Analysis, ConditionSummary, MetricSummary, PredictionResult, Verdict
from framework.analysis.rows import ConditionData, TrialsConflict, distinct_rows, group_rows
from framework.core import evidence
from framework.core.design import Condition, matching
from framework.core.spec import Decrease, Equivalent, Hypothesis, Increase, Interaction, Launches, effective_reference
from framework.stats import anytime, decisions, effects, sequential

__all__ = ["BOOTSTRAP_RESAMPLES", "LOSS_LIMIT", "METHODS", "Analysis", "ConditionSummary", "MetricSummary",
           "PredictionResult", "TrialsConflict", "Verdict", "analyze", "distinct_rows", "sequential_look"]

METHODS = ("welch", "rank", "bootstrap", "anytime")
BOOTSTRAP_RESAMPLES = 4000
# A comparison whose condition lost more than this share of its launches (failed at start-up or
# served nothing) or of its measured requests is inconclusive: the survivors may not represent the
# condition (docs/statistics.md, section 3, "What was lost").
LOSS_LIMIT = 0.2


# --------------------------------------------------------------------------- the analysis


def _seed(seed: int, pid: str) -> list[int]:
    """Bootstrap seed: the run's effective design seed (as recorded) and the prediction id."""
    return [int(seed), zlib.crc32(pid.encode("utf-8"))]


def _need(data: dict[int, ConditionData], cells: list[Condition], exclude: frozenset[str]) -> str | None:
    for c in cells:
        ids, logs = data[c.index].logs(exclude)
        if len(ids) < 2:
            d = data[c.index]
            ok = sum(1 for r in d.launch_rows if r.get("ok"))
            failed = len(d.launch_rows) - ok
            return (f"condition {c.label()} has {len(ids)} launch(es) with measurements "
                    f"({ok} ok, {failed} failed); at least 2 are needed")
        loss = losses(data[c.index])
        if loss["lost_share"] > LOSS_LIMIT or loss["censored_share"] > LOSS_LIMIT:
            return (f"{loss_text(c, loss)}: more than {LOSS_LIMIT:.0%} lost, so the survivors may not "
                    f"represent the condition (survivorship); no verdict is drawn from them")
        if max(logs) - min(logs) <= 1e-12 * max(1.0, abs(max(logs))):
            return (f"condition {c.label()}: all {len(ids)} launches have the same mean (zero observed spread), "
                    f"so the interval would have zero width; a metric that does not vary between launches "
                    f"was not measured (constant or cached answers), and no verdict is drawn from it")
    return None


def _loss_note(data: dict[int, ConditionData], cells: list[Condition]) -> str:
    notes = [loss_text(c, loss) for c in cells
             if (loss := losses(data[c.index]))["failed"] or loss["without_data"] or loss["censored"]]
    return "; ".join(notes)


def _one(h: Hypothesis, conds: list[Condition], where: dict[str, str]) -> Condition:
    found = matching(conds, where)
    if len(found) != 1:
        raise ValueError(f"where {where} selects {len(found)} conditions, expected 1")
    return found[0]


def _decide(h: Hypothesis, p: Any, data: dict[int, ConditionData], conds: list[Condition], a: float, method: str,
            exclude: frozenset[str] = frozenset(), seed: int = 0) -> tuple[decisions.Decision, list[Condition]]:
    """The decision of one comparison prediction at one-sided level `a`, optionally without some launches."""
    if isinstance(p, Interaction):
        ref = h.factors[p.factor].reference
        by_ref = effective_reference(h, p)
        keys = [(p.level, p.by_level), (ref, p.by_level), (p.level, by_ref), (ref, by_ref)]
        cells = [_one(h, conds, {**p.where, p.factor: f, p.by: b}) for f, b in keys]
        missing = _need(data, cells, exclude)
        if missing:
            return decisions.Decision("inconclusive", missing), cells
        logs = {k: data[c.index].logs(exclude)[1] for k, c in zip(keys, cells)}
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
    missing = _need(data, cells, exclude)
    if missing:
        return decisions.Decision("inconclusive", missing), cells
    x = data[treat.index].logs(exclude)[1]
    y = data[base.index].logs(exclude)[1]
    if method == "anytime":
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


def _anytime_effect(cells: list[dict[Any, float]], weights: list[int]) -> tuple[Any, str]:
    """The anytime-valid effect of the blocks every cell completed, or None and why not."""
    contrasts, blocks = anytime.block_contrasts(cells, weights)
    if len(contrasts) < 2:
        return None, (f"{len(contrasts)} block(s) with a measured launch in every condition compared; "
                      f"the anytime analysis needs at least 2")
    return anytime.AnytimeEffect(contrasts, extra={"block_ids": [str(b) for b in blocks]}), ""


def _launches(p: Launches, data: dict[int, ConditionData], conds: list[Condition], a: float | None = None
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
            outcomes.append(decisions.LaunchOutcome(r["launch_id"], ok, err, tuple(r.get("log_tail") or ()),
                                                    r.get("failure_class"), r.get("replicate", i)))
    if a is not None:
        outcomes.sort(key=lambda o: (str(type(o.block)), o.block))  # stable: conditions stay in order
    return decisions.launches(outcomes, p.expect, p.match, p.failure_class, rate=p.rate, a=a)


def _finite_ci(ci: tuple[float, float] | None) -> list[float] | None:
    if ci is None or not all(math.isfinite(v) for v in ci):
        return None
    return [float(ci[0]), float(ci[1])]


def _comparisons(h: Hypothesis, method: str) -> int:
    """How many predictions are tests (and so share the hypothesis-level refutation alpha).

    Launch-outcome predictions are tests only under `anytime`; otherwise they are counts.
    """
    return sum(1 for p in h.predictions if method == "anytime" or not isinstance(p, Launches))


def _analyze(h: Hypothesis, rows: Iterable[dict[str, Any]], alpha: float, method: str, a: float,
             a_refute: float | None = None, seed: int | None = None) -> Analysis:
    if method not in METHODS:
        raise ValueError(f"unknown analysis method {method!r}; allowed: {list(METHODS)}")
    seed = h.design.seed if seed is None else int(seed)
    grouped = group_rows(h, rows)
    conds, data, dropped, empty = grouped.conditions, grouped.data, grouped.dropped, grouped.empty

    stats = {c.index: launch_stats(data[c.index]) for c in conds}
    flagged = {i: st.outliers for i, st in stats.items()}

    results: list[PredictionResult] = []
    comparisons: list[tuple[Any, str]] = []
    for p in h.predictions:
        if isinstance(p, Launches):
            dec = _launches(p, data, conds, a if method == "anytime" else None)
            verdict, reason = evidence.capped(dec.verdict, dec.reason,
                                              [empty[c.index] for c in matching(conds, p.where) if c.index in empty])
            det = dict(dec.details)
            if dec.p_value is not None:
                det["p_anytime"] = dec.p_value  # valid under any stopping: the sweep adjusts this one
                comparisons.append((p, verdict))
            results.append(PredictionResult(id=p.id, kind=p.kind, verdict=verdict, estimate=dec.estimate,
                                            ci=_finite_ci(dec.ci), p_value=dec.p_value, reason=reason, details=det))
            continue
        dec, cells = _decide(h, p, data, conds, a, method, seed=seed)
        reason = dec.reason
        det = dict(dec.details)
        if method == "anytime" and dec.p_value is not None:
            det["p_anytime"] = dec.p_value  # valid under any stopping: the sweep adjusts this one
        lost = _loss_note(data, cells)
        if lost and not reason.startswith("condition "):
            reason += f"; {lost}"
        if lost:
            det["losses"] = {c.label(): losses(data[c.index]) for c in cells}
        out = frozenset(i for c in cells for i in flagged[c.index])
        if out:
            alt, _ = _decide(h, p, data, conds, a, method, exclude=out, seed=seed)
            det["sensitivity"] = {"exploratory": True, "without_launches": sorted(out), "verdict": alt.verdict,
                                  "reason": alt.reason,
                                  "note": "a look after the data, not a test: its error rate is not controlled"}
            names = ", ".join(sorted(out))
            reason += (f"; launch(es) {names} outside Tukey's fences (flagged for inspection only: the verdict "
                       f"uses every launch; an exploratory re-analysis without them is in details.sensitivity)")
        verdict, reason = evidence.capped(dec.verdict, reason, [empty[c.index] for c in cells if c.index in empty])
        results.append(PredictionResult(id=p.id, kind=p.kind, verdict=verdict, estimate=dec.estimate,
                                        ci=_finite_ci(dec.ci), p_value=dec.p_value, reason=reason, details=det))
        comparisons.append((p, verdict))

    # hypothesis-level refutation, error-controlled across the predictions that can refute it (Bonferroni)
    m = len(comparisons)
    refute_level = a if a_refute is None else a_refute
    refuters: list[str] = []
    for p, verdict in comparisons:
        if verdict != "refuted":
            continue
        if m <= 1 or refute_level >= a:
            refuters.append(p.id)
            continue
        if isinstance(p, Launches):
            again = _launches(p, data, conds, refute_level)
        else:
            again, _ = _decide(h, p, data, conds, refute_level, method, seed=seed)
        if again.verdict == "refuted":
            refuters.append(p.id)
    tested = {p.id for p, _ in comparisons}
    launch_refuted = [r.id for r in results if r.kind == "launches" and r.verdict == "refuted"
                      and r.id not in tested]
    hyp_rule = {"refute_one_sided_alpha": refute_level, "comparisons": m,
                "refuted_by": refuters + launch_refuted,
                "rule": "supported iff every prediction is (intersection-union); refuted iff a launch-outcome "
                        "prediction is refuted (a count; under anytime a test, and so one of the m) or a comparison "
                        "is refuted at the Bonferroni level alpha/m"}

    var = variance_report(data, stats)
    summaries = [condition_summary(h.metric, c, data[c.index], stats[c.index], dict(var["by_condition"][str(c.index)]))
                 for c in conds]
    details: dict[str, Any] = {
        "method": method, "alpha": alpha, "one_sided_alpha": a, "ci_level": 1 - 2 * a,
        "scale": "log", "unit_of_replication": "launch", "metric": h.metric,
        "variance": var,
        "outliers": {str(k): v for k, v in flagged.items() if v},
        "hypothesis_rule": hyp_rule,
        "seed": seed,
        "duplicates_dropped": dropped,
        "superseded_attempts": sorted(i for d in data.values() for i in d.superseded),
    }
    verdicts = [r.verdict for r in results]
    if all(v == "supported" for v in verdicts) and verdicts:
        verdict: Verdict = "supported"
    elif refuters or launch_refuted:
        verdict = "refuted"
    else:
        verdict = "inconclusive"
        if any(v == "refuted" for v in verdicts):
            hyp_rule["note"] = (f"a prediction is refuted at its own level, but not at the hypothesis-level "
                                f"one-sided {refute_level:.3g} (alpha / {hyp_rule['comparisons']} comparisons)")
    if empty:  # a run in which a condition measured nothing claims nothing (framework.core.evidence)
        details["no_data"] = {str(k): v for k, v in sorted(empty.items())}
        verdict = "inconclusive"
    return Analysis(verdict=verdict, predictions=results, conditions=summaries, details=details)


def analyze(h: Hypothesis, rows: Iterable[dict[str, Any]], *, alpha: float | None = None,
            method: str | None = None, seed: int | None = None) -> Analysis:
    """The fixed-design analysis: every prediction decided at one-sided level alpha.

    `alpha`, `method` and `seed` (the bootstrap's) default to the hypothesis's design; a run passes
    its effective design's, and an audit the ones its record holds. Equivalence uses the (1 - 2 alpha)
    interval (TOST), directional predictions and interactions the one-sided (1 - alpha) bounds. The
    hypothesis is refuted only by a refutation at alpha / m (m comparison predictions; Bonferroni).
    """
    alpha = h.design.alpha if alpha is None else float(alpha)
    method = method or h.design.analysis
    m = max(1, _comparisons(h, method))
    return _analyze(h, list(rows), alpha, method, alpha, alpha / m, seed)


def sequential_look(h: Hypothesis, rows: Iterable[dict[str, Any]], *, look: int, max_looks: int,
                    alpha: float | None = None, method: str | None = None,
                    spending: str = "obf", seed: int | None = None,
                    valid_p: bool = True) -> tuple[Analysis, bool, str]:
    """One interim look of a group-sequential design: (analysis, stop?, why).

    Each prediction is decided at the look's nominal one-sided level from Lan-DeMets alpha spending
    (O'Brien-Fleming type by default) over `max_looks` equally spaced looks; the last look spends the
    remaining alpha. Stop when every prediction is decided (supported or refuted: stopping for
    equivalence, for efficacy and for futility alike), when a condition has measured nothing so far
    (its verdicts can only be "no data"), or at the final look. At the stopping look
    each prediction's `details.p_sequential` is its repeated p-value (valid under any stopping; the
    sweep adjusts those); `valid_p=False` skips it (the calibration's inner loop).
    """
    alpha = h.design.alpha if alpha is None else float(alpha)
    method = method or h.design.analysis
    if look < 1 or max_looks < 1:
        raise ValueError("look and max_looks must be >= 1")
    m = max(1, _comparisons(h, method))
    if method == "anytime":  # e-processes: every look at the full alpha, no spending (docs section 10)
        spending = "none (anytime-valid)"
        a, a_refute = alpha, alpha / m
    else:
        a = sequential.nominal_alpha(look, max_looks, alpha, spending)
        a_refute = sequential.nominal_alpha(look, max_looks, alpha / m, spending) if m > 1 else a
    analysis = _analyze(h, list(rows), alpha, method, a, a_refute, seed)
    undecided = [p.id for p in analysis.predictions if p.verdict == "inconclusive"]
    final = look >= max_looks
    level = f"look {look} of {max_looks}, nominal one-sided alpha {a:.2g}"
    summary = ", ".join(f"{p.id} {p.verdict}" for p in analysis.predictions)
    empty = analysis.details.get("no_data")
    if not undecided:
        stop = True
        reason = f"every prediction decided at {level}: {summary}"
    elif empty:  # more launches of a setup that serves nothing (a wrong URL or key) would only burn machine time
        stop = True
        reason = f"stopped at {level}: no data: {'; '.join(empty.values())}"
    elif final:
        stop = True
        reason = f"final {level} (remaining alpha): {summary}"
    else:
        stop = False
        reason = f"continue after {level}: undecided {', '.join(undecided)}"
    if stop and valid_p and method != "anytime":  # an anytime p-value is valid as it stands
        for p in analysis.predictions:
            if p.p_value is not None:
                p.details["p_sequential"] = sequential.repeated_p_value(p.p_value, look, max_looks, spending)
    analysis.details["sequential"] = {
        "look": look, "max_looks": max_looks, "spending": spending, "alpha": alpha,
        "nominal_one_sided_alpha": a, "ci_level": 1 - 2 * a, "final": final, "stop": stop, "reason": reason,
    }
    return analysis, stop, reason
