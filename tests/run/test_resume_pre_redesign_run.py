"""A run interrupted before the redesign (its directory written at 08a34bb: format-1 trials, the old
`framework.sim` module string in its .hydra config) resumes under today's code, reuses its finished
launches and reaches the same verdict and estimates the old code reached for the same seed.

Its launch rows name no definition (issue 31): they are reused because the ledger it ran under registered
torch_symm_mem, before they started, with the file's SHA-256 as it is now; with a ledger that cannot show
it the resume is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left

from framework.core.tolerance import first_difference
from framework.records import audit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())["ledgers"]["resumed.jsonl"]["verdicts"][0]


@pytest.mark.e2e
def test_an_old_interrupted_run_resumes_to_the_old_answer(workdir: Path) -> None:
    shutil.copytree(FIXTURES / "runs" / "resumed_interrupted", workdir / "old")
    assert "framework.sim" in (workdir / "old" / ".hydra" / "config.yaml").read_text()
    refused = framework("run", "hypothesis=torch_symm_mem", "ledger=verdicts.jsonl", "design.launches=4",
                        "design.seed=21", "resume=old", "hydra.run.dir=new", cwd=workdir)
    assert refused.returncode == 2 and "name no definition" in refused.stderr, refused.stderr[-3000:]
    assert not (workdir / "verdicts.jsonl").exists() and not (workdir / "new" / "trials.jsonl").exists()
    for suffix in ("", ".head"):  # the ledger it ran under
        shutil.copy(FIXTURES / f"resumed.jsonl{suffix}", workdir / f"verdicts.jsonl{suffix}")
    result = framework("run", "hypothesis=torch_symm_mem", "ledger=verdicts.jsonl", "design.launches=4",
                       "design.seed=21", "resume=old", "hydra.run.dir=new", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    rec = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"][-1]
    attempts = rec["analysis"]["launch_attempts"]
    assert sum(1 for a in attempts.values() if a["reused_from"]) == 2  # the two launches finished before
    assert rec["analysis"]["stopping"]["launches_per_condition"] == EXPECTED["launches_per_condition"]
    assert rec["verdict"] == EXPECTED["verdict"]
    rows = [json.loads(line) for line in (workdir / "new" / "trials.jsonl").read_text().splitlines()]
    # the old rules reach the old figures from the resumed trials (within audit's tolerance: another CPU's BLAS
    # kernels move the last digits); today's (rules v2: a rate's
    # launch value is the ratio of its totals) move them in the fourth digit, with the same verdicts
    old = {p.id: p for p in audit.recompute(rec, rows, 1).predictions}
    got = {p["id"]: p for p in rec["predictions"]}
    for p in EXPECTED["predictions"]:
        assert first_difference([old[p["id"]].estimate, old[p["id"]].ci], [p["estimate"], p["ci"]]) is None, p["id"]
        assert got[p["id"]]["verdict"] == p["verdict"] and got[p["id"]]["estimate"] == pytest.approx(p["estimate"],
                                                                                                     rel=1e-3)
    assert {r.get("format", 1) for r in rows} == {1, 2}  # old rows kept as written, new ones format 2
    assert no_servers_left(workdir)
