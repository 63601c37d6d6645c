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

from framework.core import evidence
from framework.core.design import Condition, conditions
from framework.core.metrics import is_launch_metric, launch_value
from framework.core.spec import Hypothesis

# Rows that describe the same launch or request may differ only in these bookkeeping fields.
_BOOKKEEPING = frozenset({"reused_from"})


class TrialsConflict(ValueError):
    """Two rows of a trials file claim the same launch or request with different content."""


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

    def means(self, exclude: frozenset[str] = frozenset()) -> tuple[list[str], list[float]]:
        """Ids and metric means of the ok launches that measured something, apart from `exclude`."""
        ids = [r["launch_id"] for r in self.launch_rows if r.get("ok") and r["launch_id"] not in exclude
               and self.values.get(r["launch_id"])]
        return ids, [sum(self.values[i]) / len(self.values[i]) for i in ids]

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


def group_rows(h: Hypothesis, rows: Iterable[dict[str, Any]]) -> GroupedRows:
    """The rows of a trials file, each launch and request once, grouped by condition and launch.

    Raises `TrialsConflict` when two rows claim the same launch or request with different content.
    """
    conds = conditions(h)
    rows = list(rows)
    distinct, dropped = distinct_rows(rows)
    data = collect(h, distinct)
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
        kind = r.get("kind")
        key_field = {"launch": "launch_id", "request": "trial_id"}.get(str(kind))
        if key_field is None or r.get(key_field) is None:
            out.append(r)
            continue
        key = (str(kind), str(r[key_field]))
        core = {k: v for k, v in r.items() if k not in _BOOKKEEPING}
        prev = seen.get(key)
        if prev is None:
            seen[key] = core
            out.append(r)
        elif prev == core:
            dropped[str(kind)] += 1
        else:
            diff = sorted(k for k in set(prev) | set(core) if prev.get(k) != core.get(k))
            raise TrialsConflict(f"the trials file has conflicting rows for {kind} {r[key_field]!r} "
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


def collect(h: Hypothesis, distinct: list[dict[str, Any]]) -> dict[int, ConditionData]:
    """Per condition, its launches and values, from rows already made distinct (`distinct_rows`).

    A request metric's values are the measured (not warm-up), ok requests' own; a launch metric
    (framework.core.metrics) has one value per launch, from all of its rows.
    """
    data = {c.index: ConditionData(c) for c in conditions(h)}
    launch_cond: dict[str, int] = {}
    launch_rows = [r for r in distinct if r.get("kind") == "launch" and r.get("condition") in data]
    gone = _superseded(launch_rows)
    for r in launch_rows:
        if r["launch_id"] in gone:
            data[r["condition"]].superseded.append(r["launch_id"])
            continue
        data[r["condition"]].launch_rows.append(r)
        launch_cond[r["launch_id"]] = r["condition"]
    requests = [r for r in distinct if r.get("kind") == "request" and r.get("launch_id") not in gone]
    for r in requests:
        c = launch_cond.get(r.get("launch_id"), r.get("condition"))
        if c not in data:
            continue
        d = data[c]
        lid = r["launch_id"]
        d.served[lid] = d.served.get(lid, False) or bool(r.get("ok"))
        if not r.get("warmup"):
            d.measured += 1
            d.censored += 0 if r.get("ok") else 1
        if r.get("warmup") or not r.get("ok"):
            continue
        v = r.get(h.metric)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            d.values[lid].append(float(v))
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
                v = launch_value(h.metric, by_launch.get(lr["launch_id"], []), dict(h.slo))
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
