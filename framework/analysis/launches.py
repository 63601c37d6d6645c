"""Phase 2 of the analysis: per condition, the launch as the unit: its metric values, outliers, losses, variance.

A launch's metric is the mean over its measured requests (or the launch metric itself), and every
comparison works on the log of those per-launch values; this phase computes them once per
condition (`launch_stats`), flags launches outside Tukey's fences (for inspection only), says what
a condition lost (`losses`), and splits the log-scale variance into between- and within-launch
parts with the cost-optimal requests per launch (`variance_report`), which `condition_summary`
reports per condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from framework.analysis.models import ConditionSummary, MetricSummary
from framework.analysis.rows import ConditionData, failure_message
from framework.core.design import Condition
from framework.core.vocabulary import DECODE_UNMEASURED, REQUEST_ERRORS
from framework.stats import outliers, variance


@dataclass(frozen=True)
class LaunchStats:
    """One condition's per-launch values, every launch that started and measured something."""

    ids: list[str]
    means: list[float]  # per-launch means, in the metric's unit
    logs: list[float]  # their logs: what comparisons and outlier fences work on
    groups: list[list[float]]  # per launch, the logs of its values (the variance components' groups)
    outliers: list[str]  # ids outside Tukey's fences of the condition's log means
    components: variance.Components


def launch_stats(d: ConditionData) -> LaunchStats:
    """The per-launch values of one condition, computed once for its summary, outliers and variance."""
    ids, means = d.means()
    logs = [math.log(v) for v in means]
    groups = [[math.log(v) for v in d.values[i]] for i in ids]
    return LaunchStats(ids=ids, means=means, logs=logs, groups=groups, outliers=outliers.flag(ids, logs),
                       components=variance.components(groups))


def losses(d: ConditionData) -> dict[str, Any]:
    """What a condition lost: launches that failed or served nothing, and measured requests that failed.

    The loss rule (framework.analysis.predictions.LOSS_LIMIT) reads `lost_share` (launches) and
    `requests_lost_share` (requests; `censored_share` in version 1). Under rules version 2 the dict
    also names the launches that failed while measured (`failed_while_measured`, in `failed`, their
    messages in `failures_while_measured`) and the ok requests without a value of the metric
    (`unmeasured`, `unmeasured_why`: {reason: n}, reasons in framework.core.vocabulary.DECODE_UNMEASURED);
    `requests_lost` = censored + unmeasured. Under version 4 (`loss_causes`) it names the censored requests'
    error classes (`censored_why`: {class: n}, words in framework.core.vocabulary.REQUEST_ERRORS).
    """
    ok = sum(1 for r in d.launch_rows if r.get("ok"))
    failed = len(d.launch_rows) - ok
    no_data = sum(1 for r in d.launch_rows if r.get("ok") and not d.values.get(r["launch_id"]))
    failures = sorted({m for m in (failure_message(r) for r in d.launch_rows) if m})
    total = len(d.launch_rows)
    out: dict[str, Any] = {"launches": total, "failed": failed, "without_data": no_data,
                           "lost_share": (failed + no_data) / total if total else 0.0,
                           "requests": d.measured, "censored": d.censored,
                           "censored_share": d.censored / d.measured if d.measured else 0.0,
                           "failures": failures}
    if d.rules.launch_end_fails:
        measured = [r for r in d.launch_rows if r.get("failed_while_measured")]
        out["failed_while_measured"] = len(measured)
        out["failures_while_measured"] = sorted({m for m in (failure_message(r) for r in measured) if m})
    lost = d.censored
    if d.rules.unmeasured_lost:
        out["unmeasured"] = d.unmeasured
        out["unmeasured_why"] = dict(sorted(d.unmeasured_why.items()))
        lost += d.unmeasured
    if d.rules.loss_causes and set(d.censored_why) - {"unknown"}:  # rows that name no class say nothing more
        out["censored_why"] = dict(sorted(d.censored_why.items()))
    if d.rules.launch_end_fails or d.rules.unmeasured_lost:
        out["requests_lost"] = lost
        out["requests_lost_share"] = lost / d.measured if d.measured else 0.0
    return out


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def loss_text(c: Condition, loss: dict[str, Any]) -> str:
    """`losses` in words, for a prediction's reason."""
    parts = []
    while_measured = loss.get("failed_while_measured", 0)
    if loss["failed"] - while_measured:
        at_start = [m for m in loss["failures"] if m not in loss.get("failures_while_measured", [])]
        first = _short(at_start[0] if at_start else "no message captured")
        parts.append(f"{loss['failed'] - while_measured} of {loss['launches']} launches failed at start-up ({first!r})")
    if while_measured:
        first = _short((loss.get("failures_while_measured") or ["no message captured"])[0])
        parts.append(f"{while_measured} of {loss['launches']} launches failed while measured ({first!r})")
    if loss["without_data"]:
        parts.append(f"{loss['without_data']} launch(es) started but measured nothing")
    if loss["censored"]:
        why = f": {censored_words(loss['censored_why'])}" if loss.get("censored_why") else ""
        parts.append(f"{loss['censored']} of {loss['requests']} measured requests failed (censored{why})")
    if loss.get("unmeasured"):
        parts.append(f"{loss['unmeasured']} of {loss['requests']} measured requests ok but not measured "
                     f"({unmeasured_words(loss['unmeasured_why'])})")
    return f"condition {c.label()} lost " + ", ".join(parts)


def censored_words(why: dict[str, int]) -> str:
    """{error class: n} in words: '5 connection_refused: connection refused: the server was gone, ...'."""
    return "; ".join(f"{n} {code}: {REQUEST_ERRORS.get(code, code)}" for code, n in why.items())


def unmeasured_words(why: dict[str, int]) -> str:
    """{reason: n} in words: '9 one_chunk: every token arrived in one chunk ...'."""
    return "; ".join(f"{n} {code}: {DECODE_UNMEASURED.get(code, code)}" for code, n in why.items())


def variance_report(data: dict[int, ConditionData], stats: dict[int, LaunchStats]) -> dict[str, Any]:
    """The log-scale variance components, pooled and per condition, and the cost-optimal requests per launch.

    The costs are the mean start-up time of ok launches and the mean end-to-end time of measured
    requests; m* is pooled over conditions and per condition (conditions differ: EAGLE's
    per-request noise is larger). `stats` is keyed like `data`, in the same order.
    """
    pooled = variance.pooled_components([s.groups for s in stats.values()])
    startup = [r["startup_s"] for d in data.values() for r in d.launch_rows
               if r.get("ok") and isinstance(r.get("startup_s"), (int, float)) and r["startup_s"] > 0]
    e2e = [v for d in data.values() for v in d.e2e]
    launch_cost = sum(startup) / len(startup) if startup else None
    request_cost = sum(e2e) / len(e2e) if e2e else None
    m_star = None
    note = None
    if pooled.var_between is not None and pooled.var_within is not None and launch_cost and request_cost:
        m = variance.optimal_requests(pooled.var_between, pooled.var_within, launch_cost, request_cost)
        if math.isfinite(m):
            m_star = m
        else:
            note = "no between-launch variance detected: more requests per launch are always cheaper"
    by_condition: dict[str, Any] = {}
    for index, s in stats.items():
        comp = s.components.as_dict()
        m_c = None
        if comp.get("var_between") and comp.get("var_within") is not None and launch_cost and request_cost:
            m_c = variance.optimal_requests(comp["var_between"], comp["var_within"], launch_cost, request_cost)
        comp["optimal_requests"] = m_c
        by_condition[str(index)] = comp
    return {
        "pooled": pooled.as_dict(), "by_condition": by_condition,
        "launch_cost_s": launch_cost, "request_cost_s": request_cost,
        "optimal_requests_per_launch": m_star,
        "recommended_requests_per_launch": max(1, math.ceil(m_star)) if m_star is not None else None,
        "note": note,
    }


def condition_summary(metric: str, c: Condition, d: ConditionData, s: LaunchStats,
                      components: dict[str, Any]) -> ConditionSummary:
    """What the record says of one condition: its launches, their metric, failures, outliers and variance."""
    ok = sum(1 for r in d.launch_rows if r.get("ok"))
    no_data = sum(1 for r in d.launch_rows if r.get("ok") and not d.served.get(r["launch_id"], False))
    failures = sorted({m for m in (failure_message(r) for r in d.launch_rows) if m})
    means, logs = s.means, s.logs
    sd = None
    if len(means) >= 2:
        mu = sum(means) / len(means)
        sd = math.sqrt(sum((v - mu) ** 2 for v in means) / (len(means) - 1))
    return ConditionSummary(
        index=c.index, levels=dict(c.levels),
        launches={"ok": ok, "failed": len(d.launch_rows) - ok, "without_data": no_data},
        metric=MetricSummary(
            name=metric, mean=(sum(means) / len(means)) if means else None, launch_means=means,
            sd_between=sd, launch_ids=s.ids,
            geometric_mean=math.exp(sum(logs) / len(logs)) if logs else None),
        failures=failures, outlier_launches=s.outliers, variance=components)
