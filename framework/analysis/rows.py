"""Phase 1 of the analysis: a trials file's rows, cleaned and grouped by condition and launch.

A trials file may hold a launch twice (a resume wrote it again) or an interrupted attempt beside
its re-run; neither may count twice or count at all, so every later phase reads the rows only
through `group_rows`: each launch and request once (`distinct_rows`), superseded attempts set
aside, and per condition its launch rows and the values of the hypothesis's metric per launch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from framework.analysis import fielddecode
from framework.analysis.ruleset import LATEST, RULESETS, RuleSet
from framework.core import evidence
from framework.core.design import Condition, conditions
from framework.core.machine import UNKNOWN as UNKNOWN_MACHINE
from framework.core.machine import launch_machines
from framework.core.metrics import (
    RATIO_METRICS,
    WINDOW_EDGE_S,
    is_launch_metric,
    launch_value,
    ratio_parts,
    unmeasured,
)
from framework.core.spec import Hypothesis
from framework.core.trials import Trials
from framework.errors import TrialsConflict

# Rows that describe the same launch or request may differ only in these bookkeeping fields.
_BOOKKEEPING = frozenset({"reused_from"})


@dataclass
class ConditionData:
    """One condition's launches and the metric's values of each, as the trials file has them."""

    cond: Condition
    launch_rows: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # measured, per launch
    served: dict[str, bool] = field(default_factory=dict)  # launch id -> any ok request (if requests sent)
    e2e: list[float] = field(default_factory=list)
    measured: int = 0  # measured (not warm-up) request rows of launches that started
    censored: int = 0  # of those, the ones that failed (no value of any metric)
    superseded: list[str] = field(default_factory=list)  # interrupted attempts re-run later in the same file
    rules: RuleSet = field(default_factory=RuleSet)  # the decision rules' switches the later phases read
    unmeasured: int = 0  # measured requests that were ok but gave no value of the metric (core.metrics.unmeasured)
    unmeasured_why: dict[str, int] = field(default_factory=dict)  # their reasons, counted
    censored_why: dict[str, int] = field(default_factory=dict)  # the censored requests' error classes, counted
    ratios: dict[str, list[tuple[float, float]]] | None = None  # per launch, (numerator, denominator) per value
    machines: dict[str, str] = field(default_factory=dict)  # launch id -> machine id (framework.core.machine)
    served_requests: dict[str, int] = field(default_factory=dict)  # launch id -> its ok requests (warm-up included)
    outputs: list[dict[str, Any]] = field(default_factory=list)  # measured request rows that kept what they generated

    def means(self, exclude: frozenset[str] = frozenset()) -> tuple[list[str], list[float]]:
        """Ids and metric values of the ok launches that measured something, apart from `exclude`.

        A launch's value is the mean of its requests' values, or under `rules.ratio_rates` for a rate
        the ratio of their totals (`ratios`).
        """
        ids = [r["launch_id"] for r in self.launch_rows if r.get("ok") and r["launch_id"] not in exclude
               and self.values.get(r["launch_id"])]
        return ids, [self._value(i) for i in ids]

    def _value(self, launch_id: str) -> float:
        values = self.values[launch_id]
        parts = (self.ratios or {}).get(launch_id)
        if parts and len(parts) == len(values):
            return sum(n for n, _ in parts) / sum(d for _, d in parts)
        return sum(values) / len(values)

    def logs(self, exclude: frozenset[str] = frozenset()) -> tuple[list[str], list[float]]:
        """`means` on the log scale, which every comparison works on."""
        ids, m = self.means(exclude)
        return ids, [math.log(v) for v in m]

    def by_block(self, exclude: frozenset[str] = frozenset()) -> dict[Any, float]:
        """Log launch means keyed by the launch's block (replicate; its position when rows carry none)."""
        ids, logs = self.logs(exclude)
        block = {r["launch_id"]: r.get("replicate", i) for i, r in enumerate(self.launch_rows)}
        return {block[i]: x for i, x in zip(ids, logs, strict=True)}


@dataclass(frozen=True)
class GroupedRows:
    """A trials file as the later phases read it: per condition its data, and what was set aside."""

    conditions: list[Condition]
    data: dict[int, ConditionData]  # by condition index, in the order of `conditions`
    dropped: dict[str, int]  # exact copies dropped, {"launch": n, "request": n}
    empty: dict[int, str]  # conditions that measured nothing, and why (framework.core.evidence)


def group_rows(h: Hypothesis, rows: Iterable[dict[str, Any]], ruleset: RuleSet | None = None) -> GroupedRows:
    """The rows of a trials file, each launch and request once, grouped by condition and launch.

    Raises `TrialsConflict` when two rows claim the same launch or request with different content.
    """
    conds = conditions(h)
    rows = list(rows)
    distinct, dropped = distinct_rows(rows)
    data = collect(h, distinct, RULESETS[LATEST] if ruleset is None else ruleset)
    return GroupedRows(conditions=conds, data=data, dropped=dropped, empty=evidence.empty_conditions(conds, rows))


def distinct_rows(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Each launch (by `launch_id`) and each request (by `trial_id`) once, and how many copies were dropped.

    A copy that repeats a row exactly (apart from bookkeeping such as `reused_from`) is dropped, so
    a launch written twice is never counted twice; two rows that claim the same id with different
    content raise `TrialsConflict`: the file no longer says what happened, and no verdict should
    be drawn from it.
    """
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    dropped = {"launch": 0, "request": 0}
    for r in rows:
        key = Trials.identity(r)
        if key is None:
            out.append(r)
            continue
        kind, row_id = key
        core = {k: v for k, v in r.items() if k not in _BOOKKEEPING}
        prev = seen.get(key)
        if prev is None:
            seen[key] = core
            out.append(r)
        elif prev == core:
            dropped[kind] += 1
        else:
            diff = sorted(k for k in set(prev) | set(core) if prev.get(k) != core.get(k))
            raise TrialsConflict(f"the trials file has conflicting rows for {kind} {row_id!r} "
                                 f"(they differ in {', '.join(diff)}); refusing to analyse it")
    return out, dropped


def _superseded(launch_rows: list[dict[str, Any]]) -> set[str]:
    """Launch ids of attempts that a later attempt of the same condition and replicate replaced.

    Only an interrupted launch is ever re-run (a resume reuses every complete one), so when a
    resume writes into the run's own file the interrupted attempt stays there beside its re-run;
    the re-run is the launch, the interrupted attempt is set aside.
    """
    latest: dict[tuple[Any, Any], int] = {}
    for r in launch_rows:
        if r.get("replicate") is not None:
            key = (r.get("condition"), r["replicate"])
            latest[key] = max(latest.get(key, 0), int(r.get("attempt") or 1))
    return {r["launch_id"] for r in launch_rows if r.get("replicate") is not None
            and int(r.get("attempt") or 1) < latest[(r.get("condition"), r["replicate"])]}


def _ended(launch_rows: list[dict[str, Any]], distinct: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The launch rows with each launch that did not serve its whole workload (its `launch_end` row says
    `ok: false`: it crashed, cut streams, hung up or stalled) failed, with that row's class and message."""
    ends = {r.get("launch_id"): r for r in Trials.of(distinct).of_kind("launch_end") if r.get("ok") is False}
    out = []
    for r in launch_rows:
        end = ends.get(r["launch_id"])
        if r.get("ok") and end is not None:
            r = {**r, "ok": False, "failed_while_measured": True, "error": end.get("error") or "failed while measured",
                 "failure_class": end.get("failure_class"), "failure_line": end.get("failure_line")}
        out.append(r)
    return out


def collect(h: Hypothesis, distinct: list[dict[str, Any]], rules: RuleSet | None = None) -> dict[int, ConditionData]:
    """Per condition, its launches and values, from rows already made distinct (`distinct_rows`).

    A request metric's values are the measured (not warm-up), ok requests' own; a launch metric
    (framework.core.metrics) has one value per launch, from all of its rows. `rules` (default:
    version 1's) says whether a launch that failed while measured counts as failed, whether a
    rate's launch value is a ratio of totals, and whether TPOT follows the field's definition
    (framework.analysis.fielddecode).
    """
    rules = RuleSet() if rules is None else rules
    data = {c.index: ConditionData(c, rules=rules) for c in conditions(h)}
    ratio = rules.ratio_rates and h.metric in RATIO_METRICS
    for d in data.values():
        d.ratios = defaultdict(list) if ratio else None
    launch_cond: dict[str, int] = {}
    trials = Trials.of(distinct)
    launch_rows = [r for r in trials.of_kind("launch") if r.get("condition") in data]
    if rules.launch_end_fails:
        launch_rows = _ended(launch_rows, distinct)
    gone = _superseded(launch_rows)
    machine_of = launch_machines(distinct, rules.machine_by_hardware)
    for r in launch_rows:
        if r["launch_id"] in gone:
            data[r["condition"]].superseded.append(r["launch_id"])
            continue
        data[r["condition"]].launch_rows.append(r)
        data[r["condition"]].machines[r["launch_id"]] = machine_of.get(r["launch_id"], UNKNOWN_MACHINE)
        launch_cond[r["launch_id"]] = r["condition"]
    requests = [r for r in trials.of_kind("request") if r.get("launch_id") not in gone]
    if rules.field_decode and fielddecode.changes(h.metric):  # TPOT as the field defines it (rules version 4)
        requests = [fielddecode.with_field_decode(r) for r in requests]
    for r in requests:
        c = launch_cond.get(r.get("launch_id"), r.get("condition"))
        if c not in data:
            continue
        d = data[c]
        lid = r["launch_id"]
        d.served[lid] = d.served.get(lid, False) or bool(r.get("ok"))
        d.served_requests[lid] = d.served_requests.get(lid, 0) + bool(r.get("ok"))
        if not r.get("warmup"):
            d.measured += 1
            d.censored += 0 if r.get("ok") else 1
            if not r.get("ok"):
                cls = str(r.get("error_class") or "unknown")
                d.censored_why[cls] = d.censored_why.get(cls, 0) + 1
        if not r.get("warmup") and r.get("output") is not None:  # an outputs prediction's (analysis.outputs)
            d.outputs.append(r)
        if r.get("warmup") or not r.get("ok"):
            continue
        why = unmeasured(h.metric, r)
        if why is not None:
            d.unmeasured += 1
            d.unmeasured_why[why] = d.unmeasured_why.get(why, 0) + 1
        v = r.get(h.metric)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            d.values[lid].append(float(v))
            parts = ratio_parts(h.metric, r) if d.ratios is not None else None
            if parts is not None and d.ratios is not None:
                d.ratios[lid].append(parts)
        e = r.get("e2e_s")
        if isinstance(e, (int, float)) and math.isfinite(e) and e > 0:
            d.e2e.append(float(e))
    if is_launch_metric(h.metric):  # one value per launch, from all of its rows (framework.core.metrics)
        by_launch: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in requests:
            by_launch[r.get("launch_id")].append(r)
        for d in data.values():
            d.values.clear()
            for lr in d.launch_rows:
                v = launch_value(h.metric, by_launch.get(lr["launch_id"], []), dict(h.slo),
                                 edge_s=WINDOW_EDGE_S if rules.window_edge else 0.0)
                if v is not None and math.isfinite(v) and v > 0:
                    d.values[lr["launch_id"]] = [float(v)]
    for d in data.values():
        d.launch_rows.sort(key=lambda r: (r.get("replicate", 0), r.get("attempt", 1), r["launch_id"]))
    return data


def failure_message(r: dict[str, Any]) -> str | None:
    """A failed launch's message: its error, else the last line of its log; None for a launch that started."""
    if r.get("ok"):
        return None
    if r.get("error"):
        return str(r["error"]).strip()
    tail = [ln for ln in r.get("log_tail") or [] if ln and ln.strip()]
    return tail[-1].strip() if tail else "failed (no message captured)"
