"""No verdict without data: which conditions of a run measured nothing, and why.

A condition has evidence when at least one of its launches either served a measured request
(a number to compare) or failed at start-up on its own (an exit code, a hang, a log line: the
outcome a `launches` prediction is about). A launch that started but from which not one
measured request came back, or an endpoint that never answered, is no evidence about the
server: the cause may be on our side (a wrong URL, a wrong API key, a dead network). A run with
such a condition must not claim anything: `cap` turns every verdict that touches it, and the
run's verdict, into *inconclusive* with the cause. Pure functions over trial rows, so `audit`
recomputes the same verdict.
"""

from __future__ import annotations

from typing import Any, Iterable

from framework.core.design import Condition
from framework.core.trials import Trials


def empty_conditions(conds: list[Condition], rows: Iterable[dict[str, Any]]) -> dict[int, str]:
    """{condition index: why it measured nothing} for every condition without evidence."""
    launches: dict[int, list[dict[str, Any]]] = {c.index: [] for c in conds}
    cond_of: dict[str, int] = {}
    served: set[str] = set()
    first_error: dict[str, str] = {}
    trials = Trials.of(rows)
    for r in trials.of_kind("launch"):
        if r.get("condition") in launches:
            launches[r["condition"]].append(r)
            cond_of[r["launch_id"]] = r["condition"]
    for r in trials.of_kind("request"):
        lid = r.get("launch_id")
        if r.get("ok") and not r.get("warmup"):
            served.add(lid)
        elif not r.get("ok") and r.get("error"):
            first_error.setdefault(lid, str(r["error"]))
    out: dict[int, str] = {}
    for c in conds:
        rows_c = launches[c.index]
        if any(_evidence(r, served) for r in rows_c):
            continue
        out[c.index] = f"condition {c.label()} measured nothing: {_cause(rows_c, first_error)}"
    return out


def _evidence(launch: dict[str, Any], served: set[str]) -> bool:
    if launch.get("ok"):
        return launch["launch_id"] in served
    return launch.get("reachable") is not False


def _cause(launch_rows: list[dict[str, Any]], first_error: dict[str, str]) -> str:
    if not launch_rows:
        return "no launch was made"
    unreachable = [r for r in launch_rows if r.get("reachable") is False]
    if unreachable:
        return f"the backend was never reachable ({unreachable[0].get('error') or 'no answer'})"
    errors = [first_error[r["launch_id"]] for r in launch_rows if r["launch_id"] in first_error]
    detail = f" (first error: {errors[0]})" if errors else ""
    return f"{len(launch_rows)} launch(es) started but no measured request succeeded{detail}"


def capped(verdict: str, reason: str, causes: list[str]) -> tuple[str, str]:
    """A prediction's (verdict, reason) when some of its conditions measured nothing: inconclusive."""
    if not causes:
        return verdict, reason
    return "inconclusive", "no data: " + "; ".join(causes)
