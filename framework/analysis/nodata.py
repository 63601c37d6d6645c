"""One rule for "no data": a condition a comparison needs, without one usable value of the metric.

`framework.core.evidence` already calls a condition empty when it served nothing (no measured
request came back, or the endpoint never answered). Rules version 2 (`RuleSet.no_value_is_no_data`)
adds the other ways a comparison is left with nothing to compare, and names the cause:

- every launch failed to start (a ready timeout, a missing `sim_profile`, a server that cannot
  import): a launch-outcome prediction counts those failures, a comparison has no number;
- the metric is 0 or undefined in every launch that served (`goodput` under an SLO no request
  meets, a launch metric that a workload cannot produce).

Such a condition enters `details["no_data"]` like an empty one, so the run records inconclusive
with the cause and exits 3. Pure over the grouped rows; the launch outcomes are read through
`losses` (framework.analysis.launches).
"""

from __future__ import annotations

from typing import Any

from framework.analysis.launches import losses
from framework.analysis.rows import GroupedRows
from framework.core.design import Condition, matching
from framework.core.spec import Hypothesis, Interaction, Launches, effective_reference


def compared(h: Hypothesis, p: Any, conds: list[Condition]) -> list[Condition]:
    """The conditions a comparison prediction compares (its cells)."""
    ref = h.factors[p.factor].reference
    cells = [c for c in matching(conds, p.where) if c.levels.get(p.factor) in (p.level, ref)]
    if isinstance(p, Interaction):
        by_levels = (p.by_level, effective_reference(h, p))
        cells = [c for c in cells if c.levels.get(p.by) in by_levels]
    return cells


def unmeasured(h: Hypothesis, grouped: GroupedRows) -> dict[int, str]:
    """{condition index: the cause} for every condition a comparison needs that has no usable value."""
    needed: dict[int, Condition] = {}
    for p in h.predictions:
        if not isinstance(p, Launches):
            needed.update({c.index: c for c in compared(h, p, grouped.conditions)})
    out: dict[int, str] = {}
    for index, c in sorted(needed.items()):
        d = grouped.data[index]
        if index in grouped.empty or not d.launch_rows or any(d.values.values()):
            continue
        loss = losses(d)
        if loss["failed"] == loss["launches"]:
            first = loss["failures"][0] if loss["failures"] else "no message captured"
            first = first if len(first) <= 200 else first[:197] + "..."
            out[index] = (f"condition {c.label()} measured nothing: all {loss['launches']} launch(es) failed to "
                          f"start ({first!r})")
        else:
            slo = f" under slo {dict(h.slo)}" if h.slo else ""
            out[index] = (f"condition {c.label()} measured nothing: {h.metric} is 0 or undefined in every launch"
                          f"{slo} ({loss['launches'] - loss['failed']} launch(es) served requests)")
    return out
