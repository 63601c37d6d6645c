"""TPOT by the field's definition under rules version 4 (`field_decode`): (e2e - ttft) / (n - 1) per request,
and a launch's TPOT from the totals over all of its requests, so that requests whose tokens came in one read
(the fast ones) are neither lost nor able to bias the survivors; version 3 records keep their own rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from framework.analysis.fielddecode import field_parts, with_field_decode
from framework.analysis.rows import group_rows
from framework.analysis.ruleset import RULESETS
from framework.core.spec import Hypothesis, load_hypothesis

ROOT = Path(__file__).resolve().parents[2]
V3, V4 = RULESETS[3], RULESETS[4]


def _hypothesis(metric: str) -> Hypothesis:
    data = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml").model_dump()
    data["metric"] = metric
    return Hypothesis.model_validate(data)


def _request(lid: str, cond: int, i: int, *, ttft: float, e2e: float, n: int, chunks: list[tuple[float, int]]
             ) -> dict:
    """A row as the client writes it: its own decode from the first token-carrying read to the last."""
    timed = [(t, k) for t, k in chunks if k]
    row = {"kind": "request", "trial_id": f"{lid}-q{i}", "launch_id": lid, "condition": cond, "levels": {},
           "index": i, "warmup": False, "ok": True, "completion_tokens": n, "ttft_s": ttft, "e2e_s": e2e,
           "chunk_times_s": [t for t, _ in chunks], "chunk_tokens": [k for _, k in chunks]}
    if len(timed) >= 2:
        tokens, secs = n - timed[0][1], timed[-1][0] - timed[0][0]
        row.update(decode_tokens=tokens, decode_s=secs, tpot_s=secs / tokens, decode_tok_s=tokens / secs)
    else:
        row.update(decode_unmeasured="one_chunk")
    return row


def _launch(h: Hypothesis, cond: int, r: int) -> list[dict]:
    """One launch: 3 requests streamed token by token (10 ms a token, first read holding 4 tokens) and
    one fast request whose 32 tokens came in one read 0.1 ms before its end."""
    lid = f"c{cond}-r{r}-a1"
    rows: list[dict] = [{"kind": "launch", "launch_id": lid, "condition": cond, "levels": {}, "replicate": r,
                         "block": r, "attempt": 1, "seed": r, "ok": True, "startup_s": 1.0, "started": "t",
                         "finished": "t"}]
    for i in range(3):
        ttft = 0.05 + 0.001 * i + 0.0001 * r
        chunks = [(ttft, 4)] + [(ttft + 0.01 * k, 1) for k in range(1, 29)]
        rows.append(_request(lid, cond, i, ttft=ttft, e2e=chunks[-1][0] + 0.0005, n=32, chunks=chunks))
    rows.append(_request(lid, cond, 3, ttft=0.30, e2e=0.3001, n=32, chunks=[(0.30, 32)]))
    return rows


def _rows(h: Hypothesis) -> list[dict]:
    from framework.core.design import conditions

    out: list[dict] = []
    for c in conditions(h):
        for r in range(3):
            out += [{**row, "condition": c.index, "levels": dict(c.levels)} for row in _launch(h, c.index, r)]
    return out


def test_a_request_s_tpot_is_e2e_minus_ttft_over_n_minus_one():
    row = _request("l", 0, 0, ttft=0.05, e2e=0.3305, n=32, chunks=[(0.05, 4)] + [(0.05 + 0.01 * k, 1)
                                                                                for k in range(1, 29)])
    assert row["tpot_s"] == pytest.approx(0.28 / 28)  # the client's: after the first read's 4 tokens
    field = with_field_decode(row)
    assert field["tpot_s"] == pytest.approx((0.3305 - 0.05) / 31)
    assert field["decode_tok_s"] == pytest.approx(31 / (0.3305 - 0.05))
    assert field_parts({"ok": True, "completion_tokens": 1, "ttft_s": 0.1, "e2e_s": 0.1}) == "one_token"
    assert with_field_decode({**row, "ok": False}) == {**row, "ok": False}  # a failed request keeps its row
    # one event on the sim's model clock: e2e == ttft, no decode time; the client's reason is kept
    merged = {"ok": True, "completion_tokens": 32, "ttft_s": 0.3, "e2e_s": 0.3, "decode_unmeasured": "one_chunk"}
    assert with_field_decode(merged)["decode_unmeasured"] == "one_chunk"
    assert with_field_decode({**merged, "decode_unmeasured": None})["decode_unmeasured"] == "no_time"


@pytest.mark.parametrize("metric", ["tpot_s", "decode_tok_s"])
def test_the_launch_value_is_the_ratio_of_totals_over_every_request_including_the_one_read_ones(metric):
    h = _hypothesis(metric)
    rows = _rows(h)
    v4 = group_rows(h, rows, V4).data[0]
    lid = v4.launch_rows[0]["launch_id"]
    mine = [r for r in rows if r.get("launch_id") == lid and r["kind"] == "request"]
    secs = np.sum([r["e2e_s"] - r["ttft_s"] for r in mine])
    tokens = np.sum([r["completion_tokens"] - 1 for r in mine])
    ids, values = v4.means()
    expected = secs / tokens if metric == "tpot_s" else tokens / secs
    assert values[ids.index(lid)] == pytest.approx(expected, rel=1e-12)
    assert v4.unmeasured == 0  # the one-read requests are measured, not lost
    # version 3: the one-read request has no decode figure, counts as lost, and the survivors' TPOT is higher
    v3 = group_rows(h, rows, V3).data[0]
    assert v3.unmeasured == 3 and v3.unmeasured_why == {"one_chunk": 3}
    survivors = [r for r in mine if r.get("decode_s")]
    old = np.sum([r["decode_s"] for r in survivors]) / np.sum([r["decode_tokens"] for r in survivors])
    ids3, values3 = v3.means()
    got3 = values3[ids3.index(lid)]
    assert got3 == pytest.approx(old if metric == "tpot_s" else 1 / old, rel=1e-12)
    if metric == "tpot_s":
        assert got3 > values[ids.index(lid)]  # survivorship: losing the fast one moved the launch's TPOT up


def test_a_percentile_of_tpot_uses_the_field_s_definition_too():
    h = _hypothesis("tpot_s.p50")
    rows = _rows(h)
    v4 = group_rows(h, rows, V4).data[0]
    lid = v4.launch_rows[0]["launch_id"]
    mine = [r for r in rows if r.get("launch_id") == lid and r["kind"] == "request"]
    expected = np.percentile([(r["e2e_s"] - r["ttft_s"]) / (r["completion_tokens"] - 1) for r in mine], 50)
    assert v4.values[lid] == [pytest.approx(expected, rel=1e-12)]


def test_other_metrics_and_version_3_are_untouched():
    assert not V3.field_decode and V4.field_decode
    h = _hypothesis("ttft_s")
    rows = _rows(h)
    assert group_rows(h, rows, V4).data[0].values == group_rows(h, rows, V3).data[0].values
