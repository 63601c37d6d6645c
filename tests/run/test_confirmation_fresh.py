"""A search's confirmation is fresh by construction, whatever path it is run through (issue 31, item 2): run by
hand with `resume=` on the search directory (or a copy of its exploration) it is refused before anything starts,
and run by hand on fresh launches its record links the search as the built-in confirmation's does, so `audit`
checks it; a confirmation record without the link fails audit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import framework, ledger_records, no_servers_left
from test_resume_definition import _reseal
from test_search import WINNER, write_search


@pytest.mark.e2e  # a search (6 launches), its confirmation and one more by hand, about 60 s
def test_a_confirmation_run_by_hand_refuses_exploration_launches_and_links_its_search(workdir: Path) -> None:
    write_search(workdir, "winner", WINNER, "streams")  # a search that confirms (not its own reference)
    hyp = f"paths.hypotheses={workdir / 'hyp'}"
    out = framework("search", "hypothesis=winner", hyp, "run_dir=s", cwd=workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((workdir / "s" / "search.json").read_text())
    confirm = workdir / "s" / summary["confirm_hypothesis"]["path"]
    before = (workdir / "verdicts.jsonl").read_text()
    exploration = ledger_records(workdir / "verdicts.jsonl")[0]

    # the path a user finds by hand: resume= the search directory (its exploration's trials)
    out = framework("run", f"hypothesis={confirm}", "resume=s", "hydra.run.dir=c1", cwd=workdir)
    line = out.stderr.strip()
    assert out.returncode == 2 and "\n" not in line and "Traceback" not in line, out.stderr[-2000:]
    assert f"is the exploration of search {summary['id']}" in line and "fresh launches only" in line, line
    # a copy of the exploration elsewhere: its seeds give it away
    (workdir / "copy").mkdir()
    shutil.copy(workdir / "s" / "trials.jsonl", workdir / "copy" / "trials.jsonl")
    out = framework("run", f"hypothesis={confirm}", "resume=copy", "hydra.run.dir=c1", cwd=workdir)
    given_away = f"have seeds or launch ids of search {summary['id']}'s exploration"
    assert out.returncode == 2 and given_away in out.stderr, out.stderr[-2000:]
    # with its seeds edited, its launches (an id and a start) still do
    rows = [json.loads(x) for x in (workdir / "s" / "trials.jsonl").read_text().splitlines() if x.strip()]
    (workdir / "copy" / "trials.jsonl").write_text("".join(
        json.dumps({**r, "seed": r["seed"] + 1} if r["kind"] == "launch" else r) + "\n" for r in rows))
    out = framework("run", f"hypothesis={confirm}", "resume=copy", "hydra.run.dir=c1", cwd=workdir)
    assert out.returncode == 2 and given_away in out.stderr, out.stderr[-2000:]
    assert (workdir / "verdicts.jsonl").read_text() == before and not (workdir / "c1" / "trials.jsonl").exists()

    # by hand on fresh launches: the record links the search, and audit checks the link
    out = framework("run", f"hypothesis={confirm}", "hydra.run.dir=c2", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert no_servers_left(workdir)
    records = ledger_records(workdir / "verdicts.jsonl")
    by_hand = records[-1]
    assert by_hand["kind"] == "verdict" and by_hand["search"] == {**records[2]["search"]}
    assert by_hand["search"]["exploration"] == exploration["hash"] and by_hand["search"]["id"] == summary["id"]
    audit = framework("audit", cwd=workdir)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]

    # a confirmation record stripped of its link (as one run before this change was) fails audit
    _reseal(workdir / "verdicts.jsonl", [*records[:-1], {k: v for k, v in by_hand.items() if k != "search"}])
    audit = framework("audit", cwd=workdir)
    text = " ".join(audit.stdout.split() + audit.stderr.split())
    assert audit.returncode == 1 and f"confirms search '{summary['id']}'" in text and "does not link it" in text, \
        text[-3000:]
