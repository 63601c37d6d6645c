"""Trials format 2: rows say their format, a real server's request rows carry no sim_* keys, and
rows of format 1 (written before formats existed) read the same way."""

from __future__ import annotations

import json
from pathlib import Path

from framework.core.trials import FORMAT, RequestRow, Trials, parse_trials

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_redesign"
COMMON = {"format": FORMAT, "launch_id": "c0-r0-a1", "condition": 0, "levels": {"f": "on"}}


def test_a_real_servers_request_row_has_no_sim_fields() -> None:
    row = RequestRow(**COMMON, trial_id="t", index=0, warmup=False, ok=True, decode_tok_s=90.0,
                     sim_max_lag_s=None, sim_first_lag_s=None).to_json()
    assert row["format"] == 2 and row["decode_tok_s"] == 90.0
    assert not [k for k in row if k.startswith("sim_")]


def test_the_sims_request_row_keeps_its_fields() -> None:
    row = RequestRow(**COMMON, trial_id="t", index=0, warmup=False, ok=True, sim_max_lag_s=0.001).to_json()
    assert row["sim_max_lag_s"] == 0.001


def test_format_1_rows_read_as_before() -> None:
    trials_file = next(FIXTURES.glob("runs/*/trials.jsonl"))
    t = Trials(parse_trials(trials_file.read_bytes(), trials_file))
    assert t.formats == {1}
    assert t.launches and all(r.format == 1 for r in t.launches)  # typed: a missing field is its default
    assert set(t.by_launch()) == {r.launch_id for r in t.launches}
    assert sum(len(v) for v in t.by_condition().values()) == len(t.rows)


def test_rows_are_indexed_by_kind_launch_and_condition() -> None:
    rows = [dict(COMMON, kind="launch", replicate=0, block=0, seed=1, ok=True, started="a", finished="b"),
            dict(COMMON, kind="request", trial_id="t0", index=0, warmup=False, ok=True),
            dict(COMMON, kind="request", trial_id="t1", index=1, warmup=False, ok=True, launch_id="c1-r0-a1",
                 condition=1)]
    t = Trials(json.loads(json.dumps(rows)))
    assert [r.trial_id for r in t.requests] == ["t0", "t1"]
    assert list(t.by_launch()) == ["c0-r0-a1", "c1-r0-a1"] and sorted(t.by_condition()) == [0, 1]
    assert t.of_kind("workload") == [] and t.formats == {2}
