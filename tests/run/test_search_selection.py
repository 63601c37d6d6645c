"""The search's account of its selection (framework.run.search.selection_summary, selection_line): what
search.json records of KN and the line the console prints, for each way KN can end."""

from __future__ import annotations

import math

import numpy as np

from framework.run.search import selection_line, selection_summary
from framework.stats import ranking

BASE = {"procedure": "KN (Kim & Nelson 2001)", "alpha": 0.05, "delta": 0.01, "first_stage": 5, "max_launches": 20}


def _sel(values: dict[str, list[float]], cap: int | None = None, delta: float = 0.01) -> dict:
    st = ranking.kn_select(values, 0.05, math.log1p(delta), 5, max_stage_cap=cap)
    return {**BASE, "finalists": list(values), **selection_summary(st, values),
            "guaranteed": st.done and "WITHOUT" not in st.why}


def test_a_clear_winner_is_recorded_with_its_eliminations_and_the_guarantee():
    rng = np.random.default_rng(1)
    vals = {"a": list(np.exp(rng.normal(0.1, 0.01, 30))), "b": list(np.exp(rng.normal(0.0, 0.01, 30)))}
    sel = _sel(vals)
    assert sel["best"] == "a" and sel["eliminated"] == {"b": sel["stage"]} and sel["within_delta"] == []
    assert sel["fresh_launches"] == {"a": 30, "b": 30} and sel["guaranteed"]
    line = selection_line(sel)
    assert "P(correct selection) >= 0.95 when the best leads by 0.01" in line
    assert "no other finalist is within delta" in line


def test_finalists_not_separated_by_the_cap_are_named_and_the_guarantee_is_withheld():
    rng = np.random.default_rng(2)
    vals = {"a": list(np.exp(rng.normal(0.0, 0.01, 8))), "b": list(np.exp(rng.normal(0.0, 0.01, 8)))}
    sel = _sel(vals, cap=8, delta=0.001)
    assert sel["done"] and not sel["guaranteed"] and len(sel["within_delta"]) == 1
    assert "but not separated from" in selection_line(sel)


def test_a_selection_that_could_not_start_says_why():
    sel = {**BASE, "finalists": ["a"], "done": False, "best": "a", "why": "1 feasible candidate(s) with 2 launches"}
    assert selection_line(sel).startswith("selection (KN (Kim & Nelson 2001)): none: 1 feasible")
