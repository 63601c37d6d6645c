"""Rules version 4's window edge (`RuleSet.window_edge`, core.metrics.WINDOW_EDGE_S): what ends at the measured
window's start is outside it however the client rounded its timestamps; versions 1-3 keep their edges."""

from __future__ import annotations

import pytest
from cli_helpers import ROOT

from framework.analysis.rows import collect, distinct_rows
from framework.analysis.ruleset import RULESETS
from framework.core.metrics import WINDOW_EDGE_S, launch_value
from framework.core.spec import load_hypothesis


def closed_loop(streams: int = 4, rounds: int = 2, step: float = 0.25, rounding: float = 4e-8) -> list[dict]:
    """One warm-up round then `rounds` measured ones of `streams` streams in lockstep; each request one
    `step` long with two chunks. The warm-up's ends, where the measured requests start, carry the rounding."""
    rows = []
    for k in range(rounds + 1):
        for _ in range(streams):
            e2e = step + (rounding if k == 0 else 0.0)  # rounded up by 0.04 us: a hair past the window's start
            rows.append({"kind": "request", "warmup": k == 0, "ok": True, "clock": "sim_model",
                         "model_start_s": k * step, "e2e_s": e2e, "completion_tokens": 2,
                         "chunk_model_times_s": [e2e / 2, e2e], "chunk_model_tokens": [1, 1]})
    return rows


def test_the_edge_leaves_out_the_warm_up_that_ends_where_the_window_starts():
    rows = closed_loop()  # window: 0.25 .. 0.75 s; 8 measured requests end inside it
    assert launch_value("request_throughput", rows, edge_s=WINDOW_EDGE_S) == pytest.approx(8 / 0.5)
    assert launch_value("request_throughput", rows) == pytest.approx(12 / 0.5)  # versions 1-3: the warm-up too
    # tokens: the warm-up's last chunk arrived at the start (produced before it): outside under the edge
    assert launch_value("output_throughput", rows, edge_s=WINDOW_EDGE_S) == pytest.approx(16 / 0.5)
    exact = closed_loop(rounding=0.0)
    assert launch_value("output_throughput", exact) == pytest.approx(20 / 0.5)  # the old edge: [start, end]


def test_version_4_turns_the_edge_on_and_earlier_versions_keep_theirs():
    assert [RULESETS[v].window_edge for v in (1, 2, 3, 4)] == [False, False, False, True]
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_under_load.yaml").model_copy(
        update={"metric": "request_throughput"})
    rows = []
    for lid in ("a", "b"):
        rows.append({"kind": "launch", "launch_id": lid, "condition": 0, "ok": True, "replicate": 0, "attempt": 1})
        rows += [{**r, "launch_id": lid, "condition": 0} for r in closed_loop()]
    distinct, _ = distinct_rows(rows)
    values = {v: collect(h, distinct, RULESETS[v])[0].values for v in (3, 4)}
    assert values[3]["a"] == pytest.approx([24.0]) and values[4]["a"] == pytest.approx([16.0])
