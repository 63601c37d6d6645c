"""A run directory's launches belong to one definition: `resume=` after an edit of the hypothesis does not reuse
launches that never ran the edit (issue 31, item 1), carrying them over is an amendment the ledger and the record
list, and `audit` recomputes the check from the trials file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left

from framework.records import ledger

HA = """\
name: ha
statement: All-reduce fusion leaves decode throughput unchanged.
experiment: rtx_pro_6000_tp8
metric: decode_tok_s
factors:
  fusion:
    reference: "off"
    levels:
      "off": {}
      "on": {server_args: [--enable-flashinfer-allreduce-fusion]}
predictions:
  - {id: same, kind: equivalent, factor: fusion, level: "on", margin: 0.05}
design: {launches: 2, requests: 1, warmup: 0, seed: 7}
"""
EAGLE3 = "--speculative-algorithm, EAGLE3, --speculative-draft-model-path, lmsys/SGLang-EAGLE3-DeepSeek-V3"
ARGS = ("hypothesis=ha", "backend.speedup=20")


def _reseal(path: Path, records: list[dict]) -> None:
    """A consistent rewrite of the ledger (every hash and link recomputed, and the head file): only the
    recomputation from the trials file can tell."""
    prev, out, renamed = ledger.GENESIS, [], {}
    for rec in records:
        body = {k: renamed.get(v, v) if isinstance(v, str) else v for k, v in rec.items()
                if k not in ("hash", "prev_hash")}
        out.append(ledger.seal(body, prev))
        renamed[rec["hash"]] = prev = out[-1]["hash"]
    path.write_text("".join(ledger.canonical_json(r) + "\n" for r in out))
    Path(str(path) + ".head").write_text(json.dumps({"count": len(out), "hash": prev}))


def _trials(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.e2e  # three short sim runs, about 60 s
def test_resume_after_an_edit_does_not_reuse_launches_of_the_old_definition(workdir: Path) -> None:
    (workdir / "hypotheses").mkdir()
    ha = workdir / "hypotheses" / "ha.yaml"
    ha.write_text(HA)
    out = framework("run", *ARGS, "hydra.run.dir=run1", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    launches = [r for r in _trials(workdir / "run1" / "trials.jsonl") if r["kind"] == "launch"]
    ends = [r for r in _trials(workdir / "run1" / "trials.jsonl") if r["kind"] == "launch_end"]
    assert len(launches) == 4 and all(r["definition"] == launches[0]["definition"] for r in launches + ends)
    assert set(launches[0]["definition"]) == {"hypothesis", "experiment", "design"}

    # the edit: EAGLE-3 added to the `on` level; the resume is refused before anything is written or started
    ha.write_text(HA.replace("[--enable-flashinfer-allreduce-fusion]", f"[--enable-flashinfer-allreduce-fusion, "
                                                                       f"{EAGLE3}]"))
    before = (workdir / "verdicts.jsonl").read_text()
    out = framework("run", *ARGS, "resume=run1", "allow_amend=true", "hydra.run.dir=run2", cwd=workdir)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert "resume: run1: 4 launch(es)" in line and "another definition of 'ha'" in line, line
    assert "the hypothesis file changed" in line and "fresh directory" in line and "resume_carry=" in line, line
    assert (workdir / "verdicts.jsonl").read_text() == before  # no amendment, no record
    assert not (workdir / "run2" / "trials.jsonl").exists()

    # carrying them over by name is an amendment that lists them, and so does the record; audit passes it
    ids = sorted(r["launch_id"] for r in launches)
    out = framework("run", *ARGS, "resume=run1", f"resume_carry=[{','.join(ids)}]", "hydra.run.dir=run2",
                    cwd=workdir)
    assert out.returncode == 2 and "allow_amend=true" in out.stderr, out.stderr[-2000:]
    out = framework("run", *ARGS, "resume=run1", "resume_carry=[c9-r9-a1]", "allow_amend=true",
                    "hydra.run.dir=run2", cwd=workdir)
    assert out.returncode == 2 and "no launch 'c9-r9-a1'" in out.stderr, out.stderr[-2000:]
    out = framework("run", *ARGS, "resume=run1", f"resume_carry=[{','.join(ids)}]", "allow_amend=true",
                    "hydra.run.dir=run2", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "4 launch(es) carried over" in " ".join(out.stdout.split()), out.stdout[-2000:]
    assert no_servers_left(workdir)
    records = ledger_records(workdir / "verdicts.jsonl")
    assert [r["kind"] for r in records] == ["registration", "verdict", "amendment", "verdict"]
    amendment, record = records[2], records[3]
    assert amendment["carried_over"] == ids and record["analysis"]["carried_over"] == ids
    assert record["registration"] == amendment["hash"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]

    # a record doctored to claim the old launches as its own (no carry-over listed) fails audit, and so does a
    # carry-over the amendment does not list
    doctored = [dict(r) for r in records]
    doctored[3] = {**record, "analysis": {k: v for k, v in record["analysis"].items() if k != "carried_over"}}
    _reseal(workdir / "verdicts.jsonl", doctored)
    audit = framework("audit", cwd=workdir)
    text = " ".join(audit.stdout.split() + audit.stderr.split())
    assert audit.returncode == 1 and "4 launch(es)" in text and "another definition" in text, text[-3000:]
    doctored = [dict(r) for r in records]
    doctored[2] = {k: v for k, v in amendment.items() if k != "carried_over"}
    _reseal(workdir / "verdicts.jsonl", doctored)
    audit = framework("audit", cwd=workdir)
    text = " ".join(audit.stdout.split() + audit.stderr.split())
    assert audit.returncode == 1 and "does not list it" in text, text[-3000:]
