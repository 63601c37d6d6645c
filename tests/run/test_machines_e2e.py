"""One design over two machine slots, end to end on the sim with a machine-level effect: machine.slot runs each
slot's blocks and resume=[A,B] merges them into one record that audits clean.

The two slots are this host under two labels (machine.label), which is what the sim draws its machine factors
from. A label names a machine and does not make one (issue 31): under rules version 4 the merge covers "this
machine", and says the two labels are one machine; read under version 3, where the label was part of the
machine's identity, the same rows cover 2 machines with a wider interval, as they were recorded then. A
real fleet differs in host, CPU or GPU UUIDs. A forged host in the merged rows fails audit.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left

from framework.core.machine import identity
from framework.records import audit, ledger

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
    assert "population: this machine (16 launches; the design spreads them over 2; labels A, B name one machine" \
        in merged.stdout
    assert not (workdir / "merged" / "logs").exists() or not any((workdir / "merged" / "logs").iterdir())
    assert no_servers_left(workdir)

    rows = _rows(workdir / "merged" / "trials.jsonl")
    launches = [r for r in rows if r["kind"] == "launch"]
    by_label = {r["machine"]["label"]: r["machine"]["id"] for r in launches}
    assert sorted(by_label) == ["A", "B"] and by_label["A"] != by_label["B"]
    assert all(r["block"] % 2 == (0 if r["machine"]["label"] == "A" else 1) for r in launches)

    records = [r for r in ledger_records(workdir / "verdicts.jsonl") if r["kind"] == "verdict"]
    record = records[-1]
    pop = record["population"]
    assert pop["scope"] == "this machine" and pop["design_machines"] == 2 and pop["machines"] == 1
    assert list(pop["labels_by_machine"].values()) == [["A", "B"]]
    assert "labels A, B name one machine" in pop["note"]
    assert [Path(p).name for p in record["analysis"]["resumed_from"]] == ["run0", "run1"]
    assert records[0]["population"]["scope"] == "this machine"  # slot 0's own record: only label A's launches
    helps = {p["id"]: p for p in record["predictions"]}["helps_eagle3"]
    assert helps["details"]["population"] == "this machine" and helps["details"]["df"] > 1  # launches, not m - 1
    # the same rows under rules version 3 (labels were machines) cover 2 machines, with 1 df and a wider interval
    v3 = audit.recompute(record, rows, 3)
    assert v3.details["population"]["machines"] == 2
    old = {p.id: p for p in v3.predictions}["helps_eagle3"]
    assert old.details["population"] == "2 machines" and old.details["df"] == 1
    assert math.log(old.ci[1] / old.ci[0]) > math.log(helps["ci"][1] / helps["ci"][0])

    check = framework("audit", "ledger=verdicts.jsonl", cwd=workdir)
    assert check.returncode == 0, check.stdout[-3000:]

    # label B's copies forged onto another host (ids recomputed, record and ledger resealed): audit fails
    trials = workdir / "merged" / "trials.jsonl"
    forged = [{**r, "machine": identity("host-b", r["machine"]["cpu"], r["machine"]["gpus"], "B")}
              if r["kind"] == "launch" and r["machine"]["label"] == "B" else r for r in rows]
    trials.write_text("".join(json.dumps(r) + "\n" for r in forged))
    data = trials.read_bytes()
    entries = ledger_records(workdir / "verdicts.jsonl")
    entries[-1]["trials"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    prev, out = ledger.GENESIS, []
    for rec in entries:
        out.append(ledger.seal(rec, prev))
        prev = out[-1]["hash"]
    (workdir / "verdicts.jsonl").write_text("".join(ledger.canonical_json(r) + "\n" for r in out))
    (workdir / "verdicts.jsonl.head").write_text(json.dumps({"count": len(out), "hash": prev}))
    report = audit.audit(workdir / "verdicts.jsonl")
    found = [p for p in report.problems if p.kind == "machine"]
    assert found and all("copied from" in p.message for p in found), report.problems
