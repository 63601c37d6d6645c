"""Extending a run with a verdict: the stated error inflation, cross-checked by direct simulation."""

from __future__ import annotations

import numpy as np
import pytest

from framework.stats.extension import extension, inflated_alpha, inflated_alpha_looks


def test_two_looks_at_full_alpha_match_a_simulation_of_nested_samples():
    rng = np.random.default_rng(20261130)
    draws = rng.standard_normal((200_000, 10))
    z5 = draws[:, :5].sum(1) / np.sqrt(5)
    z10 = draws.sum(1) / np.sqrt(10)
    rate = float(np.mean((z5 >= 1.6448536) | (z10 >= 1.6448536)))
    exact = inflated_alpha(0.05, 5, 10)
    assert exact == pytest.approx(0.080, abs=0.001)
    assert abs(rate - exact) < 4 * np.sqrt(exact * (1 - exact) / 200_000)  # 4 SE: a fixed seed, deterministic
    assert inflated_alpha(0.05, 5, 5) == 0.05


def test_extension_is_stated_only_when_the_design_changed():
    prev = {"hash": "h", "verdict": "inconclusive", "analysis": {"design": {"launches": 5, "requests": 2}}}
    assert extension(prev, {"launches": 5, "requests": 2}, "welch", 0.05, 5) is None
    ext = extension(prev, {"launches": 10, "requests": 2}, "welch", 0.05, 5)
    assert ext["registered"] is False and ext["changed"] == {"launches": [5, 10]}
    assert ext["error_bound"] == pytest.approx(0.080, abs=0.001) and "UNREGISTERED EXTENSION" in ext["note"]
    ok = extension(prev, {"launches": 10, "requests": 2}, "anytime", 0.05, 5)
    assert ok["registered"] is True and "error_bound" not in ok


def test_three_looks_match_a_simulation_and_the_issue_figure():
    rng = np.random.default_rng(20261201)
    draws = rng.standard_normal((200_000, 15))
    z = 1.6448536
    hit = np.zeros(len(draws), bool)
    for n in (5, 10, 15):
        hit |= draws[:, :n].sum(1) / np.sqrt(n) >= z
    exact = inflated_alpha_looks(0.05, [5, 10, 15])
    assert exact == pytest.approx(0.101, abs=0.0005)  # the issue's bound for looks at 5, 10 and 15
    assert abs(hit.mean() - exact) < 4 * np.sqrt(exact * (1 - exact) / 200_000)
    assert inflated_alpha_looks(0.05, [5, 10]) == inflated_alpha(0.05, 5, 10)
    assert inflated_alpha_looks(0.05, [10]) == 0.05
    assert inflated_alpha_looks(0.05, [5, 10, 15]) == exact  # seeded: a record's figure recomputes exactly


def test_a_chain_of_extensions_is_bounded_as_a_whole():
    first = {"hash": "h1", "verdict": "inconclusive", "analysis": {"design": {"launches": 5, "analysis": "welch"}}}
    ext1 = extension(first, {"launches": 10, "analysis": "welch"}, "welch", 0.05, 5, chain=True)
    assert ext1["looks"] == [5, 10] and ext1["error_bound"] == pytest.approx(0.080, abs=0.001)
    second = {"hash": "h2", "verdict": "inconclusive",
              "analysis": {"design": {"launches": 10, "analysis": "welch"}, "extension": ext1}}
    ext2 = extension(second, {"launches": 15, "analysis": "welch"}, "welch", 0.05, 10, chain=True)
    assert ext2["looks"] == [5, 10, 15] and ext2["error_bound"] == pytest.approx(0.101, abs=0.001)
    assert "5 -> 10 -> 15" in ext2["note"]
    # version 1 states only the last step (0.074), as it did
    old = extension(second, {"launches": 15, "analysis": "welch"}, "welch", 0.05, 10)
    assert old["error_bound"] == pytest.approx(0.074, abs=0.001) and "looks" not in old
    # a record of version 1 in the chain names only its last step: the chain is rebuilt from it
    v1_ext = {"changed": {"launches": [5, 10]}, "registered": False}
    third = {"hash": "h3", "analysis": {"design": {"launches": 10, "analysis": "welch"}, "extension": v1_ext}}
    rebuilt = extension(third, {"launches": 15, "analysis": "welch"}, "welch", 0.05, 10, chain=True)
    assert rebuilt["looks"] == [5, 10, 15]


def test_switching_to_anytime_at_an_extension_is_not_registered():
    welch = {"hash": "h", "verdict": "inconclusive", "analysis": {"design": {"launches": 5, "analysis": "welch"}}}
    ext = extension(welch, {"launches": 10, "analysis": "anytime"}, "anytime", 0.05, 5, chain=True)
    assert ext["registered"] is False and ext["changed"]["analysis"] == ["welch", "anytime"]
    assert ext["error_bound"] == pytest.approx(0.10) and "UNREGISTERED EXTENSION" in ext["note"]
    anytime = {"hash": "h", "verdict": "inconclusive", "analysis": {"design": {"launches": 5, "analysis": "anytime"}}}
    ok = extension(anytime, {"launches": 10, "analysis": "anytime"}, "anytime", 0.05, 5, chain=True)
    assert ok["registered"] is True and "error_bound" not in ok
    # version 1 called the switch registered
    assert extension(welch, {"launches": 10, "analysis": "anytime"}, "anytime", 0.05, 5)["registered"] is True
