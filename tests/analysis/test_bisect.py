"""The bisection as a pure replay: it asks for the launches it needs, names the change point, stops after the
ends when they do not differ, and gives the same answer from the whole trials as it gave launch by launch."""

from __future__ import annotations

import math

import numpy as np

from framework.analysis import bisect as an
from framework.core.design import conditions
from framework.core.spec import Hypothesis


def _settings(n: int, **kw) -> an.Settings:
    base = {"versions": n, "alpha": 0.05, "threshold": 0.03, "margin": 0.015, "launches": 3, "block": 2,
            "max_launches": 60, "max_failures": 3}
    return an.Settings(**{**base, **kw})


def _run(s: an.Settings, k: int | None, seed: int, sd: float = 0.006, extra_after: int = 0):
    """Drive the replay as the policy does, drawing launch values: 100 before version k, 97 from k on."""
    rng = np.random.default_rng(seed)
    values: list[list[float]] = [[] for _ in range(s.versions)]
    fails = [0] * s.versions
    asked = []
    while True:
        st = an.replay(s, values, fails)
        if st.done:
            break
        asked.append(dict(st.need))
        for v, target in st.need.items():
            while len(values[v]) < target:
                values[v].append((97.0 if k is not None and v >= k else 100.0) * math.exp(rng.normal(0, sd)))
    for v in range(s.versions):  # launches added after every decision leave every decision as it was
        values[v] += [1.0] * (extra_after if values[v] else 0)
    return st, values, asked


def test_names_the_change_point_and_probes_at_most_ceil_log2() -> None:
    s = _settings(64)
    for seed, k in ((1, 37), (2, 1), (3, 63)):
        st, values, _ = _run(s, k, seed)
        assert st.outcome == "named" and st.first_bad == k and st.last_good == k - 1, (seed, st.reason)
        probes = [c for c in st.compared if c.role == "probe"]
        assert len(probes) <= s.probes == 6
        assert sum(1 for v in values if v) <= s.probes + 2


def test_first_launches_are_the_ends() -> None:
    _, _, asked = _run(_settings(9), 4, 5)
    assert asked[0] == {0: 3, 8: 3}


def test_no_change_stops_after_the_first_comparison_and_says_so() -> None:
    st, values, _ = _run(_settings(16, threshold=0.05, margin=0.025), None, 7)
    assert st.outcome == "no_change" and len(st.compared) == 1 and st.compared[0].role == "ends"
    assert "stopped after the first comparison" in st.reason
    assert sum(1 for v in values if v) == 2


def test_replay_reads_each_decision_at_its_own_look() -> None:
    s = _settings(16)
    st, values, _ = _run(s, 5, 11)
    again = an.replay(s, [v[: len(v)] for v in values], [0] * 16)
    assert (again.outcome, again.first_bad) == (st.outcome, st.first_bad)
    st2, values2, _ = _run(s, 5, 11, extra_after=4)  # later launches at 1.0 would flip any decision re-read
    assert an.replay(s, values2, [0] * 16).first_bad == st.first_bad == st2.first_bad


def test_a_version_that_keeps_failing_ends_the_bisection() -> None:
    s = _settings(5)
    st = an.replay(s, [[], [], [], [], []], [3, 0, 0, 0, 0])
    assert st.outcome == "failed" and "version 0" in st.reason
    st = an.replay(s, [[], [], [], [], []], [2, 0, 0, 0, 0])
    assert st.need == {0: 3, 4: 3}


def test_version_hypothesis_is_one_factor_and_a_commit_runs_from_its_worktree() -> None:
    h = Hypothesis.model_validate({"name": "b", "statement": "s", "experiment": "e", "bisect": {
        "threshold": 0.05, "repo": ".", "versions": [{"name": "a", "commit": "aaaa"}, {"name": "b", "commit": "bbbb"},
                                                     {"name": "c", "commit": "cccc", "env": {"X": "1"}}]}})
    g = an.version_hypothesis(h, {"a": "/w/a", "b": "/w/b", "c": "/w/c"})
    assert [c.levels for c in conditions(g)] == [{"version": "a"}, {"version": "b"}, {"version": "c"}]
    lv = g.factors["version"].levels["c"]
    assert lv.env == {"X": "1", "PYTHONPATH": "/w/c", "PYTHONSAFEPATH": "1"}
    assert g.factors["version"].reference == "a"


def test_the_gap_rule_names_the_same_version_with_fewer_launches() -> None:
    spent = {}
    for gap in (False, True):
        total = 0
        for seed in range(6):
            st, values, _ = _run(_settings(16, gap=gap), 9, seed, sd=0.01)
            assert st.outcome == "named" and st.first_bad == 9, (gap, seed, st.reason)
            total += sum(len(v) for v in values)
        spent[gap] = total
    assert spent[True] < spent[False]


def test_a_gradual_drift_is_not_named_under_the_gap_rule() -> None:
    s = _settings(9, gap=True, max_launches=200)
    rng = np.random.default_rng(4)
    values: list[list[float]] = [[] for _ in range(s.versions)]
    while True:  # decode falls 1% a version: the ends differ by 8%, the midpoint sits half-way between them
        st = an.replay(s, values, [0] * s.versions)
        if st.done:
            break
        for v, target in st.need.items():
            while len(values[v]) < target:
                values[v].append(100.0 * 0.99 ** v * math.exp(rng.normal(0, 0.002)))
    assert st.outcome == "undecided" and "like neither end" in st.reason
    assert st.compared[-1].call == "between"
