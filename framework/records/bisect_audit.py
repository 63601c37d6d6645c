"""Audit of a bisection: its files are as recorded, and replaying the bisection from its trials rows (under the
record's own rules version) gives the outcome, the versions named, the probes and the launches it records.

Called by :func:`framework.records.audit.audit` for `bisect` records; each finding is a `Problem`.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from framework.analysis import bisect as an
from framework.analysis.ruleset import RULESETS
from framework.core.spec import Hypothesis, parse_yaml, validate_model
from framework.core.trials import parse_trials
from framework.records.ledger import Problem
from framework.records.search_audit import _resolve


def recompute(rec: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The bisect.json figures the record's hypothesis and rules give on these rows."""
    content = (rec.get("hypothesis") or {}).get("content") or ""
    h: Hypothesis = validate_model(Hypothesis, parse_yaml(content, "record"), "record")
    ruleset = RULESETS.get(int(rec.get("rules_version") or 0))
    st = an.state_of(h, rows, ruleset)
    if rec.get("outcome") == "stopped" and not st.done:  # its time budget ended it before the replay finished
        st.outcome, st.reason = "stopped", str(rec.get("reason") or "")
    return an.summary(h, st, an.version_data(h, rows, ruleset))


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def bisect_problems(rec: dict[str, Any], line: int, ledger_path: Path) -> list[Problem]:
    """The trials and bisect.json are unchanged, and the replayed bisection agrees with the record."""
    name = (rec.get("hypothesis") or {}).get("name")
    out: list[Problem] = []

    def problem(msg: str) -> None:
        out.append(Problem(line, rec.get("hash"), name, "bisect", msg))

    rows: list[dict[str, Any]] | None = None
    for what, ref in (("bisect.json", rec.get("bisect_json") or {}), ("trials file", rec.get("trials") or {})):
        path = _resolve(ledger_path, str(ref.get("path") or ""))
        if path is None:
            problem(f"the bisection's {what} {ref.get('path')!r} is not found")
            continue
        data = path.read_bytes()
        size = ref.get("bytes")
        if hashlib.sha256(data).hexdigest() != ref.get("sha256") and not (
                isinstance(size, int) and hashlib.sha256(data[:size]).hexdigest() == ref.get("sha256")):
            problem(f"the bisection's {what} {ref.get('path')} changed since it was recorded")
            continue
        if what == "trials file":
            rows = parse_trials(data[:size] if isinstance(size, int) else data, path)
    if rows is None:
        return out
    try:
        got = recompute(rec, rows)
    except Exception as exc:  # a record whose hypothesis no longer parses: say so, do not crash the audit
        problem(f"cannot replay the bisection: {exc}")
        return out
    for key in ("outcome", "first_bad", "last_good", "first_bad_commit", "probed", "launches_spent",
                "linear_scan_launches"):
        if not _close(got.get(key), rec.get(key)):
            problem(f"{key}: recorded {rec.get(key)!r}, the trials give {got.get(key)!r}")
    step, want = got.get("step") or {}, rec.get("step") or {}
    if bool(step) != bool(want) or (step and not _close(step.get("ratio"), want.get("ratio"))):
        problem(f"step: recorded {want.get('ratio')!r}, the trials give {step.get('ratio')!r}")
    return out
