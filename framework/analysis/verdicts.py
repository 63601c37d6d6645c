"""From raw trial rows to per-prediction verdicts: the pure analysis every run and every audit uses.

`analyze(h, rows)` reads nothing and writes nothing: it takes the hypothesis as registered and the
rows of a trials file (dicts as written, see `framework.records.trials`) and returns an `Analysis`.
The run calls it once at the end (or `sequential_look` at every look, for sequential designs);
`audit` calls it again on the stored file and compares.

The unit of replication is the launch: a launch's metric is the mean over its measured requests
(not warm-up, ok), and every comparison works on the log of those per-launch values. The decision
rules are in `framework.stats.decisions`, the formulas and references in docs/statistics.md.

The analysis runs in four phases, each a pure function of the one before:
`framework.analysis.rows` (the rows, each launch and request once, grouped by condition and launch),
`framework.analysis.launches` (per-launch values, outliers, losses, variance components),
`framework.analysis.predictions` (each prediction decided at its level), and here the combination
into one verdict (the hypothesis-level refutation rule) and the `Analysis` it returns. The names
other modules import from here (the models in `framework.analysis.models`, `distinct_rows`,
`TrialsConflict`, the constants) are re-exported.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from framework.analysis import machines, nodata
from framework.analysis import outputs as outputs_analysis
from framework.analysis.launches import condition_summary, launch_stats, losses, variance_report
from framework.analysis.models import Analysis, ConditionSummary, MetricSummary, PredictionResult, Verdict
from framework.analysis.predictions import (
    BOOTSTRAP_RESAMPLES,
    LOSS_LIMIT,
    METHODS,
    decide,
    decide_launches,
    decide_predictions,
)
from framework.analysis.rows import GroupedRows, TrialsConflict, distinct_rows, group_rows
from framework.analysis.ruleset import LATEST, RULESETS, RuleSet
from framework.core.spec import Hypothesis, Launches, Outputs
from framework.stats import sequential

__all__ = ["BOOTSTRAP_RESAMPLES", "LOSS_LIMIT", "METHODS", "Analysis", "ConditionSummary", "MetricSummary",
           "PredictionResult", "TrialsConflict", "Verdict", "analyze", "distinct_rows", "sequential_look"]

_RULE = ("supported iff every prediction is (intersection-union); refuted iff a launch-outcome prediction is "
        "refuted (a count; under anytime a test, and so one of the m) or a comparison is refuted at the "
        "Bonferroni level alpha/m")


def _comparisons(h: Hypothesis, method: str) -> int:
    """How many predictions are tests (and so share the hypothesis-level refutation alpha).

    Launch-outcome predictions are tests only under `anytime`; otherwise they are counts.
    """
    return sum(1 for p in h.predictions if method == "anytime" or not isinstance(p, Launches))


def hypothesis_rule(h: Hypothesis, rows: GroupedRows, results: list[PredictionResult],
                    tests: list[tuple[Any, Verdict]], a: float, refute_level: float, method: str,
                    seed: int, ruleset: RuleSet = RULESETS[1]) -> dict[str, Any]:
    """Which predictions refute the hypothesis: the error is controlled across the m tests (Bonferroni).

    A test refuted at its own level `a` refutes the hypothesis only when it is refuted again at
    `refute_level` (alpha / m; no re-decision needed when m <= 1); a launch-outcome count that is
    refuted refutes it as it stands.
    """
    m = len(tests)
    refuters: list[str] = []
    for p, verdict in tests:
        if verdict != "refuted":
            continue
        if m <= 1 or refute_level >= a:
            refuters.append(p.id)
            continue
        if isinstance(p, Launches):
            again = decide_launches(p, rows.data, rows.conditions, refute_level)
        elif isinstance(p, Outputs):
            again = outputs_analysis.decide(h, p, rows, refute_level, ruleset)
        else:
            again, _ = decide(h, p, rows.data, rows.conditions, refute_level, method, seed=seed, ruleset=ruleset)
        if again.verdict == "refuted":
            refuters.append(p.id)
    tested = {p.id for p, _ in tests}
    launch_refuted = [r.id for r in results if r.kind == "launches" and r.verdict == "refuted"
                      and r.id not in tested]
    return {"refute_one_sided_alpha": refute_level, "comparisons": m, "refuted_by": refuters + launch_refuted,
            "rule": _RULE}


def combine(results: list[PredictionResult], rule: dict[str, Any], empty: dict[int, str]
            ) -> tuple[Verdict, str | None]:
    """The hypothesis's verdict from its predictions' and the refutation rule, and a note when they seem to differ.

    Supported iff every prediction is (intersection-union), refuted iff the rule names a refuter;
    a run in which a condition measured nothing claims nothing (framework.core.evidence).
    """
    verdicts = [r.verdict for r in results]
    note = None
    if all(v == "supported" for v in verdicts) and verdicts:
        verdict: Verdict = "supported"
    elif rule["refuted_by"]:
        verdict = "refuted"
    else:
        verdict = "inconclusive"
        if any(v == "refuted" for v in verdicts):
            note = (f"a prediction is refuted at its own level, but not at the hypothesis-level "
                    f"one-sided {rule['refute_one_sided_alpha']:.3g} (alpha / {rule['comparisons']} comparisons)")
    if empty:
        verdict = "inconclusive"
    return verdict, note


def _analyze(h: Hypothesis, rows: Iterable[dict[str, Any]], alpha: float, method: str, a: float,
             a_refute: float | None = None, seed: int | None = None, ruleset: RuleSet | None = None) -> Analysis:
    """The four phases: rows grouped, per-launch values, predictions decided, one verdict."""
    ruleset = RULESETS[LATEST] if ruleset is None else ruleset  # the phases read their switches
    if method not in METHODS:
        raise ValueError(f"unknown analysis method {method!r}; allowed: {list(METHODS)}")
    seed = h.design.seed if seed is None else int(seed)
    grouped = group_rows(h, rows, ruleset)
    if ruleset.no_value_is_no_data:
        grouped = replace(grouped, empty={**grouped.empty, **nodata.unmeasured(h, grouped)})
    stats = {c.index: launch_stats(grouped.data[c.index]) for c in grouped.conditions}
    flagged = {i: s.outliers for i, s in stats.items()}
    results, tests = decide_predictions(h, grouped, flagged, a, method, seed, ruleset)
    refute_level = a if a_refute is None else a_refute
    rule = hypothesis_rule(h, grouped, results, tests, a, refute_level, method, seed, ruleset)
    var = variance_report(grouped.data, stats)
    summaries = [condition_summary(h.metric, c, grouped.data[c.index], stats[c.index],
                                   dict(var["by_condition"][str(c.index)])) for c in grouped.conditions]
    verdict, note = combine(results, rule, grouped.empty)
    if note is not None:
        rule = {**rule, "note": note}
    details: dict[str, Any] = {
        "method": method, "alpha": alpha, "one_sided_alpha": a, "ci_level": 1 - 2 * a,
        "scale": "log", "unit_of_replication": "launch", "metric": h.metric,
        "variance": var,
        "outliers": {str(k): v for k, v in flagged.items() if v},
        "hypothesis_rule": rule,
        "seed": seed,
        "duplicates_dropped": grouped.dropped,
        "superseded_attempts": sorted(i for d in grouped.data.values() for i in d.superseded),
    }
    if ruleset.launch_end_fails or ruleset.unmeasured_lost:  # what each condition lost, by index (version 2)
        details["losses"] = {str(c.index): losses(grouped.data[c.index]) for c in grouped.conditions}
    if ruleset.machine_effect:  # the machines the verdict covers, and the machine-level variance (rules version 3)
        details["population"] = machines.population(grouped.data)
        if details["population"]["machines"] > 1:
            var["machine"] = machines.level_variance(grouped.data)
    if grouped.empty:  # a run in which a condition measured nothing claims nothing (framework.core.evidence)
        details["no_data"] = {str(k): v for k, v in sorted(grouped.empty.items())}
    return Analysis(verdict=verdict, predictions=results, conditions=summaries, details=details)


def analyze(h: Hypothesis, rows: Iterable[dict[str, Any]], *, alpha: float | None = None,
            method: str | None = None, seed: int | None = None, ruleset: RuleSet | None = None) -> Analysis:
    """The fixed-design analysis: every prediction decided at one-sided level alpha.

    `alpha`, `method` and `seed` (the bootstrap's) default to the hypothesis's design; a run passes
    its effective design's, and an audit the ones its record holds. Equivalence uses the (1 - 2 alpha)
    interval (TOST), directional predictions and interactions the one-sided (1 - alpha) bounds. The
    hypothesis is refuted only by a refutation at alpha / m (m comparison predictions; Bonferroni).
    """
    alpha = h.design.alpha if alpha is None else float(alpha)
    method = method or h.design.analysis
    m = max(1, _comparisons(h, method))
    return _analyze(h, list(rows), alpha, method, alpha, alpha / m, seed, ruleset)


def sequential_look(h: Hypothesis, rows: Iterable[dict[str, Any]], *, look: int, max_looks: int,
                    alpha: float | None = None, method: str | None = None,
                    spending: str = "obf", seed: int | None = None,
                    valid_p: bool = True, ruleset: RuleSet | None = None) -> tuple[Analysis, bool, str]:
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
    analysis = _analyze(h, list(rows), alpha, method, a, a_refute, seed, ruleset)
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
