"""Extending a run that already has a verdict: what changed, whether the rule allows it, what it costs.

"Run 5; if it is not decided, extend to 10" is the habit of every engineer who sees an
inconclusive result. Under a fixed-sample rule it is two looks at the full alpha, and the error of
each one-sided test rises to P(Z_1 >= z or Z_2 >= z) with corr(Z_1, Z_2) = sqrt(n_1 / n_2) (the
z statistics of nested samples; Armitage, McPherson & Rowe 1969). For 5 -> 10 at alpha 0.05 that is
0.080 (the audit measured 0.078 with 4000 simulations of the A/A case). Under the anytime-valid
rule (`design.analysis: anytime`, registered) the extension is covered: its e-processes hold at
every n. Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats

# design fields whose change makes a resumed run an extension (alpha and the method are registered:
# changing those is an amendment, handled by the registration)
DESIGN_FIELDS = ("launches", "requests", "warmup", "sequential")


def inflated_alpha(alpha: float, n1: int, n2: int) -> float:
    """One-sided error of a fixed-level test read at n1 and again at n2 > n1 launches per condition."""
    if n2 <= n1 or n1 < 1:
        return float(alpha)
    z = float(stats.norm.isf(alpha))
    rho = math.sqrt(n1 / n2)
    both_below = stats.multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, rho], [rho, 1.0]]).cdf([z, z])
    return float(1.0 - both_below)


def changed_design(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The design fields that differ between two recorded designs: {field: [before, after]}."""
    return {k: [before.get(k), after.get(k)] for k in DESIGN_FIELDS if before.get(k) != after.get(k)}


def launches_of(previous: dict[str, Any] | None) -> int | None:
    """The most launches per condition an earlier verdict stood on."""
    counts = [int((c.get("launches") or {}).get("ok", 0)) + int((c.get("launches") or {}).get("failed", 0))
              for c in (previous or {}).get("conditions") or []]
    return max(counts) if counts else None


def extension(previous: dict[str, Any], design: dict[str, Any], method: str, alpha: float,
              previous_launches: int | None) -> dict[str, Any] | None:
    """What the record states when a resume changes the design of a run that already has a verdict.

    `previous` is the earlier verdict record, `design` the new effective design (as recorded), and
    `previous_launches` the launches per condition the earlier verdict stood on.
    """
    before = ((previous.get("analysis") or {}).get("design") or {})
    changed = changed_design(before, design)
    if not changed:
        return None
    out: dict[str, Any] = {
        "of": previous.get("hash"), "previous_verdict": previous.get("verdict"), "changed": changed,
        "registered": method == "anytime", "alpha": alpha,
    }
    if method == "anytime":
        out["note"] = ("extension of an anytime-valid run: the e-processes hold at every number of launches, "
                       f"so each prediction's error stays at most {alpha:g}")
        return out
    n1 = previous_launches or int(before.get("launches") or 0)
    n2 = int(design.get("launches") or 0)
    seq = design.get("sequential") or {}
    if seq.get("enabled") and seq.get("max_launches"):
        n2 = int(seq["max_launches"])
    worst = inflated_alpha(alpha, n1, n2) if n1 and n2 > n1 else None
    out["error_bound"] = worst
    out["note"] = ("UNREGISTERED EXTENSION of a run that already had a verdict, analysed as if planned: "
                   + (f"reading the test at {n1} and again at {n2} launches per condition raises each one-sided "
                      f"error from {alpha:g} to up to {worst:.3f}" if worst is not None else
                      f"the error of each prediction is no longer {alpha:g}")
                   + "; register design.analysis: anytime to extend runs without this cost")
    return out
