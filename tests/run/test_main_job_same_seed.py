"""The main job gives, for the same seed, the same three estimates it gave before the redesign.

`python -m framework run hypothesis=eagle3_allreduce design.seed=1`, through real sim processes and
HTTP, against the figures the code at 08a34bb produced for that seed (four runs there repeated them
bit for bit: the sim's figures come from its model clock, which the machine's load does not move
in a single-stream run). Recorded in tests/fixtures/pre_redesign/expected.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import framework, ledger_records, no_servers_left

from framework.analysis import rules

EXPECTED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign" / "expected.json")
                      .read_text())["main_job_seed1"]


def test_the_main_job_repeats_its_estimates_for_seed_1(workdir: Path) -> None:
    result = framework("run", "hypothesis=eagle3_allreduce", "design.seed=1", "ledger=verdicts.jsonl", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    verdict = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"][-1]
    assert verdict["backend"] == "sim" and verdict["rules_version"] == rules.CURRENT
    got = {p["id"]: p for p in verdict["predictions"]}
    for pid, want in EXPECTED["predictions"].items():
        assert got[pid]["verdict"] == want["verdict"]
        assert got[pid]["estimate"] == want["estimate"], pid
        assert got[pid]["ci"] == want["ci"], pid
        assert got[pid]["p_value"] == want["p_value"], pid
    assert no_servers_left(workdir)
