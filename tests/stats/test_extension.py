"""Extending a run with a verdict: the stated error inflation, cross-checked by direct simulation."""

from __future__ import annotations

import numpy as np
import pytest

from framework.stats.extension import extension, inflated_alpha


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
