"""The servers' own counters summed per condition beside the verdict (prompt lookup's drafted/accepted tokens)."""

from __future__ import annotations

import pytest

from framework.run.record import server_counters


def end(levels: dict, **counters: float) -> dict:
    return {"kind": "launch_end", "launch_id": f"l{id(counters)}", "levels": levels,
            "server_metrics": {f"llamacpp_spec:{k}_total": v for k, v in counters.items()}}


def test_counters_are_summed_per_condition_with_each_per_request_and_the_accept_rate():
    rows = [end({"speculation": "on"}, requests=4, drafted_tokens=40, accepted_tokens=30),
            end({"speculation": "on"}, requests=4, drafted_tokens=20, accepted_tokens=6),
            end({"speculation": "off"}, requests=4, drafted_tokens=0, accepted_tokens=0)]
    out = server_counters(rows)["server_counters"]
    on = out["speculation=on"]
    assert on["launches"] == 2 and on["totals"]["llamacpp_spec:drafted_tokens_total"] == 60
    assert on["per_request"]["llamacpp_spec:accepted_tokens_total"] == pytest.approx(36 / 8)
    assert on["accept_rate"] == pytest.approx(0.6)
    assert "accept_rate" not in out["speculation=off"]  # nothing drafted: no rate


def test_no_counters_no_entry():
    assert server_counters([{"kind": "launch_end", "launch_id": "a", "levels": {}, "server_metrics": None}]) == {}
