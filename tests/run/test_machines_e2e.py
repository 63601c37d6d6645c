"""One design over two machines, end to end on the sim with a machine-level effect: machine.slot runs each
machine's blocks, resume=[A,B] merges them into one record that audits clean and covers 2 machines, with a
wider interval than the same rows read as one machine's; a run on one machine says "this machine".

The two machines are this host under two labels (machine.label, part of a machine's identity), which is
what the sim draws its machine factors from (the label, so the figures are the same on every host); a real
fleet differs in host, CPU or GPU UUIDs instead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left

from framework.records import audit

ARGS = ["hypothesis=eagle3_allreduce", "design.launches=4", "design.sequential=false", "design.requests=2",
        "design.warmup=0", "design.machines=2", "backend.machine_effect=0.1", "ledger=verdicts.jsonl"]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.e2e
def test_two_machines_one_after_another_make_one_record(workdir: Path) -> None:
    for slot, label in ((0, "A"), (1, "B")):
        out = framework("run", *ARGS, f"machine.slot={slot}", f"machine.label={label}",
                        f"hydra.run.dir=run{slot}", cwd=workdir)
        assert out.returncode == 0, out.stderr[-3000:]
    merged = framework("run", *ARGS, "resume=[run0,run1]", "hydra.run.dir=merged", cwd=workdir)
    assert merged.returncode == 0, merged.stderr[-3000:]
    assert "population: 2 machines (8 + 8 launches" in merged.stdout
    assert not (workdir / "merged" / "logs").exists() or not any((workdir / "merged" / "logs").iterdir())
    assert no_servers_left(workdir)

    rows = _rows(workdir / "merged" / "trials.jsonl")
    launches = [r for r in rows if r["kind"] == "launch"]
    by_label = {r["machine"]["label"]: r["machine"]["id"] for r in launches}
    assert sorted(by_label) == ["A", "B"] and by_label["A"] != by_label["B"]
    assert all(r["block"] % 2 == (0 if r["machine"]["label"] == "A" else 1) for r in launches)

    records = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    record = records[-1]
    assert record["population"]["scope"] == "2 machines" and record["population"]["design_machines"] == 2
    assert [Path(p).name for p in record["analysis"]["resumed_from"]] == ["run0", "run1"]
    assert records[0]["population"]["scope"] == "this machine"  # slot 0's own record: only machine A's launches
    helps = {p["id"]: p for p in record["predictions"]}["helps_eagle3"]
    assert helps["details"]["population"] == "2 machines" and helps["details"]["df"] == 1
    # the next machine beside the interval for these two machines' mean, and why it is not useful (issue 33)
    nm = helps["details"]["new_machine"]
    assert nm["df"] == 1 and nm["machines"] == 2 and not nm["useful"] and nm["machines_for_useful"] == 8
    assert "helps_eagle3, the next machine: 90% prediction interval for one new machine" in merged.stdout
    summary = (workdir / "merged" / "summary.md").read_text(encoding="utf-8")
    assert "| helps_eagle3 | 90% prediction interval for one new machine [" in summary
    assert "1 degree of freedom" in summary and "a useful one needs 8 machines" in summary
    # the same rows read without the machine (rules version 2) give a narrower interval than the fleet's
    old = {p.id: p for p in audit.recompute(record, rows, 2).predictions}["helps_eagle3"]
    assert math.log(helps["ci"][1] / helps["ci"][0]) > math.log(old.ci[1] / old.ci[0])

    check = framework("audit", "ledger=verdicts.jsonl", cwd=workdir)
    assert check.returncode == 0, check.stdout[-3000:]
