"""An `outputs` prediction decided: does the level generate what its reference generates for the same prompts?

Requests are the unit, launches the block. Within block b the level's launch and the reference's launch
sent the same prompts (core.outputs: `workload.prompt_seed`); a level request is paired with the reference
request of the same block that sent the same prompt (its sha256; the k-th occurrence with the k-th), and the
pair is identical when the generated token ids are equal (the text, where the server sends no ids:
framework.execution.client.capture). Failed requests, requests without a partner and pairs of which one
kept ids and the other text are not compared, and the record counts them.

The agreement rate is identical / compared over all blocks, with Korn-Graubard's clustered Clopper-Pearson
bounds (framework.stats.agreement). Against the registered `min_agreement` (theta): supported when the
one-sided lower bound >= theta, refuted when the upper bound < theta, else inconclusive; for theta = 1,
supported when every compared pair is identical and refuted by any difference. Nothing compared: no verdict.
The record names the first `DIFFERED_KEPT` pairs that differ (block, request index, first differing position).
docs/statistics.md, "Outputs: an agreement rate over blocked requests". Pure.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from framework.analysis.models import PredictionResult
from framework.analysis.rows import GroupedRows
from framework.analysis.ruleset import RULESETS, RuleSet
from framework.core import outputs as outputs_core
from framework.core.spec import Hypothesis, Outputs
from framework.stats import agreement as agreement_stats
from framework.stats.decisions import Decision

DIFFERED_KEPT = 20  # pairs named in the record when they differ (the count is always complete)
NEEDS_V5 = "the outputs kind is decided under rules version 5 and later; this record's version has no rule for it"


def compares_outputs(prediction: dict[str, Any]) -> bool:
    """A recorded prediction of the outputs kind: generated tokens compared, so no timing figure moves it."""
    return prediction.get("kind") == "outputs"


def _generated(out: dict[str, Any]) -> tuple[str, Any]:
    return ("ids", out["ids"]) if "ids" in out else ("text", out.get("text") or "")


def first_difference(a: Any, b: Any) -> int | None:
    """The first position where two sequences (ids, or text by character) differ; None when equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _by_block(rows: GroupedRows, cond_index: int) -> dict[Any, list[dict[str, Any]]]:
    d = rows.data[cond_index]
    block = {r["launch_id"]: r.get("replicate", i) for i, r in enumerate(d.launch_rows)}
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in d.outputs:
        if r.get("launch_id") in block:
            out[block[r["launch_id"]]].append(r)
    for reqs in out.values():
        reqs.sort(key=lambda r: r.get("index", 0))
    return out


def compare(h: Hypothesis, p: Outputs, rows: GroupedRows) -> dict[str, Any]:
    """Every pair the prediction compares, per block: counts, what was compared, and the pairs that differ."""
    treat, base = outputs_core.pairs(h, p)[0]
    level, ref = _by_block(rows, treat.index), _by_block(rows, base.index)
    per_block: list[dict[str, Any]] = []
    differed: list[dict[str, Any]] = []
    n_differed = unpaired = failed = mixed = 0
    kinds: set[str] = set()
    for b in sorted(set(level) | set(ref), key=str):
        pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in ref.get(b, []):
            pool[r["output"]["prompt_sha256"]].append(r)
        compared = identical = 0
        for r in level.get(b, []):
            partners = pool.get(r["output"]["prompt_sha256"])
            if not partners:
                unpaired += 1
                continue
            q = partners.pop(0)
            if not (r.get("ok") and q.get("ok")):
                failed += 1
                continue
            (ka, a), (kb, bb) = _generated(r["output"]), _generated(q["output"])
            if ka != kb:
                mixed += 1
                continue
            kinds.add(ka)
            compared += 1
            at = first_difference(a, bb)
            if at is None:
                identical += 1
                continue
            n_differed += 1
            if len(differed) < DIFFERED_KEPT:
                differed.append({"block": b, "index": r.get("index"), "reference_index": q.get("index"),
                                 "launch": r.get("launch_id"), "reference_launch": q.get("launch_id"),
                                 "first_difference": at, "compared": ka,
                                 "length": len(a), "reference_length": len(bb)})
        unpaired += sum(len(v) for v in pool.values())
        if compared:
            per_block.append({"block": b, "compared": compared, "identical": identical})
    return {"per_block": per_block, "differed": differed, "differed_count": n_differed, "unpaired": unpaired,
            "failed": failed, "mixed_kinds": mixed, "compares": sorted(kinds) or None,
            "level": treat.label(), "reference": base.label()}


def decide(h: Hypothesis, p: Outputs, rows: GroupedRows, a: float, ruleset: RuleSet = RULESETS[1]) -> Decision:
    """The decision at one-sided level `a` (see the module docstring)."""
    if not ruleset.outputs_kind:
        return Decision("inconclusive", NEEDS_V5)
    found = compare(h, p, rows)
    blocks = found["per_block"]
    agr = agreement_stats.agreement([b["identical"] for b in blocks], [b["compared"] for b in blocks], a)
    theta = p.min_agreement
    det: dict[str, Any] = {**found, "min_agreement": theta, "identical": agr.identical, "compared": agr.compared,
                           "blocks": agr.blocks, "one_sided_alpha": a,
                           "bound": {"method": "Korn-Graubard clustered Clopper-Pearson (blocks: launch pairs)",
                                     "lower": agr.lower, "upper": agr.upper, "n_effective": agr.n_effective,
                                     "cluster_variance": agr.variance}}
    what = " and ".join(found["compares"] or ["nothing"])
    if agr.compared == 0:
        return Decision("inconclusive", f"no paired requests to compare between [{found['level']}] and "
                        f"[{found['reference']}] ({found['unpaired']} unpaired, {found['failed']} failed): no verdict",
                        details=det)
    ci = (agr.lower, agr.upper)
    head = (f"{agr.identical} of {agr.compared} paired requests generated identical {what} over {agr.blocks} "
            f"block(s) (agreement {agr.estimate:.3f}, one-sided {1 - a:.3g} bounds [{agr.lower:.3f}, "
            f"{agr.upper:.3f}])")
    if found["differed_count"]:
        first = found["differed"][0]
        head += (f"; first difference: block {first['block']}, request {first['index']}, at position "
                 f"{first['first_difference']}")
    if theta >= 1.0:
        if agr.identical == agr.compared:
            det["guarantee"] = {"identical_needed_for_0.95": agreement_stats.identical_needed(0.95, a)}
            return Decision("supported", f"{head}: every compared request is identical; as independent requests "
                            f"that bounds the agreement at >= {a ** (1 / agr.compared):.3f} (a^(1/n)), and 0.95 "
                            f"needs {agreement_stats.identical_needed(0.95, a)} identical requests",
                            estimate=agr.estimate, ci=ci, details=det)
        return Decision("refuted", f"{head}: min_agreement 1.0 claims every request identical, "
                        f"{found['differed_count']} differ", estimate=agr.estimate, ci=ci, details=det)
    if agr.blocks < 2:
        return Decision("inconclusive", f"{head}: a bound below 1.0 needs at least 2 blocks for its variance",
                        estimate=agr.estimate, ci=ci, details=det)
    if agr.lower >= theta:
        return Decision("supported", f"{head}: lower bound >= min_agreement {theta:g}", estimate=agr.estimate,
                        ci=ci, details=det)
    if agr.upper < theta:
        return Decision("refuted", f"{head}: upper bound < min_agreement {theta:g}", estimate=agr.estimate,
                        ci=ci, details=det)
    return Decision("inconclusive", f"{head}: the bounds straddle min_agreement {theta:g}", estimate=agr.estimate,
                    ci=ci, details=det)


def result(h: Hypothesis, p: Outputs, rows: GroupedRows, a: float, ruleset: RuleSet = RULESETS[1]) -> PredictionResult:
    """The prediction's result as the record keeps it."""
    dec = decide(h, p, rows, a, ruleset)
    ci = [float(dec.ci[0]), float(dec.ci[1])] if dec.ci is not None else None
    return PredictionResult(id=p.id, kind=p.kind, verdict=dec.verdict, estimate=dec.estimate, ci=ci,
                            p_value=None, reason=dec.reason, details=dict(dec.details))
