"""Extending a run that already has a verdict: what changed, whether the rule allows it, what it costs.

"Run 5; if it is not decided, extend to 10" is the habit of every engineer who sees an
inconclusive result. Under a fixed-sample rule it is two looks at the full alpha, and the error of
each one-sided test rises to P(Z_1 >= z or Z_2 >= z) with corr(Z_1, Z_2) = sqrt(n_1 / n_2) (the
z statistics of nested samples; Armitage, McPherson & Rowe 1969). For 5 -> 10 at alpha 0.05 that is
0.080 (the audit measured 0.078 with 4000 simulations of the A/A case). Under the anytime-valid
rule (`design.analysis: anytime`, registered) the extension is covered: its e-processes hold at
every n, provided it was the registered rule before the first look: a switch to it at an extension
covers the looks after the switch only. A chain of extensions (5 -> 10 -> 15 by two resumes) is
accounted for as a whole: its bound covers every look taken, P(Z_k >= z for some k) with
corr(Z_i, Z_j) = sqrt(n_i / n_j). Pure functions.
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats

# design fields whose change makes a resumed run an extension (alpha is registered: changing it is an
# amendment, handled by the registration). A change of `analysis` reads the same data under another
# rule after a verdict was seen: a second look too, so it is stated (rules version 2 covers it only
# when the rule it switches to was registered before the first look).
DESIGN_FIELDS = ("launches", "requests", "warmup", "sequential")
METHOD_FIELD = "analysis"
ANYTIME = "anytime"


def inflated_alpha(alpha: float, n1: int, n2: int) -> float:
    """One-sided error of a fixed-level test read at n1 and again at n2 > n1 launches per condition."""
    if n2 <= n1 or n1 < 1:
        return float(alpha)
    z = float(stats.norm.isf(alpha))
    rho = math.sqrt(n1 / n2)
    both_below = stats.multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, rho], [rho, 1.0]]).cdf([z, z])
    return float(1.0 - both_below)


def inflated_alpha_looks(alpha: float, looks: list[int]) -> float:
    """One-sided error of a fixed-level test read at every launch count in `looks` (nested samples).

    P(max_k Z_k >= z_{1-alpha}) for the z statistics of nested samples, corr(Z_i, Z_j) = sqrt(n_i / n_j)
    (i <= j; Armitage, McPherson & Rowe 1969), from scipy's multivariate normal CDF (Genz's algorithm,
    seeded so that a record's figure recomputes exactly). Two looks reduce to `inflated_alpha`.
    """
    ns = sorted({int(n) for n in looks if int(n) >= 1})
    if len(ns) <= 1:
        return float(alpha)
    if len(ns) == 2:
        return inflated_alpha(alpha, ns[0], ns[1])
    z = float(stats.norm.isf(alpha))
    cov = [[math.sqrt(min(a, b) / max(a, b)) for b in ns] for a in ns]
    mvn = stats.multivariate_normal(mean=[0.0] * len(ns), cov=cov, seed=0, abseps=1e-7, releps=1e-7)
    return float(1.0 - mvn.cdf([z] * len(ns)))


def changed_design(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """The design fields that differ between two recorded designs: {field: [before, after]}."""
    return {k: [before.get(k), after.get(k)] for k in DESIGN_FIELDS if before.get(k) != after.get(k)}


def launches_of(previous: dict[str, Any] | None) -> int | None:
    """The most launches per condition an earlier verdict stood on."""
    counts = [int((c.get("launches") or {}).get("ok", 0)) + int((c.get("launches") or {}).get("failed", 0))
              for c in (previous or {}).get("conditions") or []]
    return max(counts) if counts else None


def _method_of(record: dict[str, Any]) -> str | None:
    analysis = record.get("analysis") or {}
    return (analysis.get("design") or {}).get(METHOD_FIELD) or analysis.get("method")


def earlier_looks(previous: dict[str, Any], previous_launches: int | None) -> list[int]:
    """The launch counts per condition at which the chain ending in `previous` was looked at, in order.

    A record that was itself an extension names its chain (`looks`; records before rules version 2
    name only the last step, `changed.launches`); a first record is one look.
    """
    ext = (previous.get("analysis") or {}).get("extension") or {}
    n_prev = previous_launches or int(((previous.get("analysis") or {}).get("design") or {}).get("launches") or 0)
    chain = [int(n) for n in ext.get("looks") or []]
    if not chain and (ext.get("changed") or {}).get("launches"):
        first = (ext["changed"]["launches"] or [None])[0]
        chain = [int(first)] if first else []
    if n_prev and (not chain or chain[-1] != n_prev):
        chain.append(n_prev)
    return chain


def chain_extension(previous: dict[str, Any], design: dict[str, Any], method: str, alpha: float,
                    previous_launches: int | None) -> dict[str, Any] | None:
    """`extension` with the chain accounted for as a whole (rules version 2).

    The bound covers every look the chain took (5 -> 10 -> 15: looks at 5, 10 and 15), and an
    anytime-valid analysis covers the extension (`registered: true`) only when every earlier look of
    the chain was anytime-valid too, i.e. it was the registered rule before the first look. A switch
    to it at an extension covers only the looks after the switch: the error is then at most the
    fixed-rule looks' bound plus alpha (a union bound; Ville's inequality for the anytime part).
    """
    before = ((previous.get("analysis") or {}).get("design") or {})
    changed = changed_design(before, design)
    m_before, m_after = before.get(METHOD_FIELD), design.get(METHOD_FIELD)
    if m_before is not None and m_after is not None and m_before != m_after:
        changed[METHOD_FIELD] = [m_before, m_after]
    if not changed:
        return None
    prior = earlier_looks(previous, previous_launches)
    n2 = int(design.get("launches") or 0)
    seq = design.get("sequential") or {}
    if seq.get("enabled") and seq.get("max_launches"):
        n2 = int(seq["max_launches"])
    looks = prior + ([n2] if n2 and (not prior or n2 > prior[-1]) else [])
    prev_ext = (previous.get("analysis") or {}).get("extension") or {}
    earlier_anytime = _method_of(previous) == ANYTIME and prev_ext.get("registered", True) is not False
    out: dict[str, Any] = {
        "of": previous.get("hash"), "previous_verdict": previous.get("verdict"), "changed": changed,
        "registered": method == ANYTIME and earlier_anytime, "alpha": alpha, "looks": looks,
    }
    if out["registered"]:
        out["note"] = ("extension of an anytime-valid run registered before its first look: the e-processes "
                       f"hold at every number of launches, so each prediction's error stays at most {alpha:g}")
        return out
    fixed_looks = prior if method == ANYTIME else looks
    worst = inflated_alpha_looks(alpha, fixed_looks) if len(fixed_looks) >= 1 else None
    if method == ANYTIME and worst is not None:
        worst = min(1.0, worst + alpha)
    if worst is not None and method != ANYTIME and len(fixed_looks) < 2:
        worst = None
    out["error_bound"] = worst
    seen = " -> ".join(str(n) for n in looks)
    if method == ANYTIME:
        what = (f"the analysis switched to anytime at this extension, after looks under {m_before or 'another rule'} "
                f"at {' -> '.join(str(n) for n in prior)} launches per condition: anytime-valid covers only "
                f"the looks after the switch, so each one-sided error is up to {worst:.3f} "
                f"(the earlier looks' bound plus {alpha:g})")
    elif worst is not None:
        what = (f"reading the test at {seen} launches per condition raises each one-sided error from "
                f"{alpha:g} to up to {worst:.3f}")
    else:
        what = f"the error of each prediction is no longer {alpha:g}"
    out["note"] = ("UNREGISTERED EXTENSION of a run that already had a verdict, analysed as if planned: " + what
                   + "; register design.analysis: anytime before the first look to extend runs without this cost")
    return out


def extension(previous: dict[str, Any], design: dict[str, Any], method: str, alpha: float,
              previous_launches: int | None, chain: bool = False) -> dict[str, Any] | None:
    """What the record states when a resume changes the design of a run that already has a verdict.

    `previous` is the earlier verdict record, `design` the new effective design (as recorded), and
    `previous_launches` the launches per condition the earlier verdict stood on. `chain` (rules
    version 2) accounts for a chain of extensions and a switch of analysis as a whole
    (`chain_extension`); without it, the last step alone, as version 1 did.
    """
    if chain:
        return chain_extension(previous, design, method, alpha, previous_launches)
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
