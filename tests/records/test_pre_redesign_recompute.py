"""Verdicts written before the redesign (fixtures at 08a34bb) recompute *exactly* under today's code.

Verdicts and launch counts must be identical; estimates, intervals, p-values and condition means equal
within audit's relative 1e-9 (framework.core.tolerance), against the figures the old code recomputed
(tests/fixtures/pre_redesign/expected.json, written by that code). On the machine and library versions that
wrote them they are bit for bit; another CPU's BLAS kernels (AVX-512) or a newer numpy/scipy move the
15th-16th digit, which no verdict can feel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.analysis.rules import version_of
from framework.core.tolerance import close, first_difference
from framework.records import audit, ledger
from framework.records.trials import read_trials

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
CASES = [(name, v) for name, entry in EXPECTED["ledgers"].items() for v in entry["verdicts"]]


@pytest.mark.parametrize(("ledger_name", "expected"), CASES, ids=[f"{n}:{v['line']}" for n, v in CASES])
def test_old_verdicts_recompute_within_audit_tolerance(ledger_name: str, expected: dict) -> None:
    records = {n: rec for n, _, rec in ledger.lines(FIXTURES / ledger_name)}
    rec = records[expected["line"]]
    assert version_of(rec) == 1  # written before versions: audited under version 1
    rows = read_trials(FIXTURES / expected["trials"])
    got = audit.recompute(rec, rows).model_dump(mode="json")
    assert got["verdict"] == expected["verdict"]
    by_id = {p["id"]: p for p in got["predictions"]}
    for p in expected["predictions"]:
        r = by_id[p["id"]]
        assert r["verdict"] == p["verdict"], p["id"]
        difference = first_difference([r["estimate"], r["ci"], r["p_value"]], [p["estimate"], p["ci"], p["p_value"]])
        assert difference is None, f"{p['id']}: {difference}"
    means = {json.dumps(c["levels"], sort_keys=True): c for c in got["conditions"]}
    for c in expected["conditions"]:
        r = means[json.dumps(c["levels"], sort_keys=True)]
        assert r["launches"]["ok"] == c["launches"]["ok"] and r["launches"]["failed"] == c["launches"]["failed"]
        assert close(r["metric"].get("mean"), c["metric_mean"]), (r["metric"].get("mean"), c["metric_mean"])
