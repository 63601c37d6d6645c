"""The pure half of the sweep summary: job records in, one summary dict out, with multiplicity-adjusted
decisions (the rules are described in :mod:`framework.run.sweep`; the methods are
:func:`framework.stats.multiplicity.adjust`)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from framework.stats.multiplicity import adjust as stats_adjust

SCHEMA = "framework.sweep_summary/1"
METHODS = {"holm": "Holm (family-wise error rate, confirmatory)",
           "fdr_bh": "Benjamini-Hochberg (false discovery rate, exploratory)"}
VERDICTS = ("supported", "refuted", "inconclusive")


def valid_p_value(prediction: dict[str, Any]) -> Any:
    """The p-value that stays valid under the job's stopping rule (sequential or anytime), else the fixed one."""
    details = prediction.get("details") or {}
    for key in ("p_anytime", "p_sequential"):
        if _is_p(details.get(key)):
            return details[key]
    return prediction.get("p_value")


def adjust(p_values: Sequence[float], method: str, alpha: float) -> tuple[list[bool], list[float]]:
    """Reject decisions and adjusted p-values of a family of tests (`framework.stats.multiplicity`)."""
    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; allowed: {sorted(METHODS)}")
    result = stats_adjust(list(p_values), method, alpha)
    return list(result.reject), list(result.p_adjusted)


def _is_p(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0.0 <= value <= 1.0


def summarize(job_records: Sequence[dict[str, Any] | None], overrides: Sequence[Sequence[str]],
              method: str = "holm", alpha: float = 0.05, *,
              jobs: Sequence[int | str] | None = None,
              errors: Sequence[str | None] | None = None) -> dict[str, Any]:
    """The sweep summary of one multirun.

    `job_records[i]` is job i's verdict record (the dict of `verdict.json`), or None when the job
    produced none (failed); `overrides[i]` is its override list. `jobs` gives the job numbers
    (default 0..n-1) and `errors` an optional failure message per job. Returns a JSON-ready dict:
    `jobs` (one row per job, predictions with their adjusted p-value and decision),
    `multiplicity`, `counts` and `varying` (the override keys whose values differ across jobs).
    """
    if len(job_records) != len(overrides):
        raise ValueError(f"{len(job_records)} job records but {len(overrides)} override lists")
    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; allowed: {sorted(METHODS)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    numbers = list(jobs) if jobs is not None else list(range(len(job_records)))
    errs = list(errors) if errors is not None else [None] * len(job_records)

    rows: list[dict[str, Any]] = []
    family: list[tuple[int, int]] = []  # (row index, prediction index) of each p-value in the family
    p_values: list[float] = []
    for i, (rec, ovr) in enumerate(zip(job_records, overrides, strict=False)):
        row: dict[str, Any] = {"job": numbers[i], "overrides": list(ovr)}
        if not rec:
            row.update(status="failed", hypothesis=_hypothesis_from_overrides(ovr), backend=None,
                       verdict=None, predictions=[], error=errs[i] or "no verdict.json (the job failed or never ran)")
            rows.append(row)
            continue
        hyp = rec.get("hypothesis") or {}
        row.update(status="ok", hypothesis=hyp.get("name") if isinstance(hyp, dict) else str(hyp),
                   backend=rec.get("backend"), verdict=rec.get("verdict"), predictions=[],
                   record_hash=rec.get("hash"), run_dir=rec.get("run_dir"),
                   no_data=((rec.get("analysis") or {}).get("details") or {}).get("no_data") or None)
        for j, p in enumerate(rec.get("predictions") or []):
            pv = valid_p_value(p)
            row["predictions"].append({
                "id": p.get("id"), "kind": p.get("kind"), "verdict": p.get("verdict"),
                "estimate": p.get("estimate"), "ci": p.get("ci"), "p_value": pv,
                "p_adjusted": None, "significant_adjusted": None, "adjusted_verdict": p.get("verdict"),
            })
            if _is_p(pv):
                family.append((i, j))
                p_values.append(float(pv))
        rows.append(row)

    reject, p_adj = adjust(p_values, method, alpha)
    for (i, j), rej, pa in zip(family, reject, p_adj, strict=False):
        pred = rows[i]["predictions"][j]
        pred["p_adjusted"] = pa
        pred["significant_adjusted"] = rej
        if pred["verdict"] == "supported" and not rej:
            pred["adjusted_verdict"] = "inconclusive"

    # The jobs' own verdicts as a second family: a hypothesis is supported only if all its
    # predictions are (an intersection-union test), so its p-value is the largest of theirs.
    job_family = [i for i, r in enumerate(rows)
                  if r["status"] == "ok" and r["predictions"] and all(_is_p(p["p_value"]) for p in r["predictions"])]
    job_p = [max(float(p["p_value"]) for p in rows[i]["predictions"]) for i in job_family]
    for r in rows:
        r.update(p_value=None, p_adjusted=None, adjusted_verdict=r["verdict"])
    job_reject, job_adj = adjust(job_p, method, alpha)
    for i, pv, rej, pa in zip(job_family, job_p, job_reject, job_adj, strict=False):
        rows[i].update(p_value=pv, p_adjusted=pa)
        if rows[i]["verdict"] == "supported" and not rej:
            rows[i]["adjusted_verdict"] = "inconclusive"

    def tally(key: str) -> dict[str, int]:
        preds = [p for r in rows for p in r["predictions"]]
        return {v: sum(1 for p in preds if p[key] == v) for v in VERDICTS}

    ok = [r for r in rows if r["status"] == "ok"]
    return {
        "schema": SCHEMA,
        "multiplicity": {"method": method, "description": METHODS[method], "alpha": alpha,
                         "family_size": len(p_values),
                         "family": "every prediction with a p-value, across all jobs of the sweep",
                         "job_family_size": len(job_p),
                         "job_family": "every ok job whose predictions all have p-values; "
                                       "job p-value = the largest of its predictions' (intersection-union)"},
        "counts": {
            "jobs": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "job_verdicts": {v: sum(1 for r in ok if r["verdict"] == v) for v in VERDICTS},
            "job_verdicts_adjusted": {v: sum(1 for r in ok if r["adjusted_verdict"] == v) for v in VERDICTS},
            "predictions": tally("verdict"),
            "predictions_adjusted": tally("adjusted_verdict"),
        },
        "varying": _varying_keys([r["overrides"] for r in rows]),
        "jobs": rows,
    }


def _hypothesis_from_overrides(overrides: Sequence[str]) -> str | None:
    for o in overrides:
        if o.startswith("hypothesis="):
            return o.split("=", 1)[1]
    return None


def _varying_keys(all_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Override keys whose value differs between jobs (or that some jobs lack), in first-seen order."""
    per_job = [{o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in ovr} for ovr in all_overrides]
    keys = list(dict.fromkeys(k for job in per_job for k in job))
    return [k for k in keys if len({job.get(k) for job in per_job}) > 1]
