"""The machine-level confidence sequence (rules version 4): one round is scipy's one-sample t at a * w_1,
the rounds' levels sum to a, and under the null its miss rate over every round stays below a."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from framework.stats.anytime_machines import MachineSequence, machine_block_contrasts, round_weight


def test_round_weights_sum_to_one():
    assert sum(round_weight(k) for k in range(1, 200_000)) == pytest.approx(1.0, abs=1e-5)
    assert round_weight(1) == pytest.approx(6 / math.pi ** 2)


def test_one_round_is_scipys_one_sample_t_at_the_round_level():
    d = {"a": [0.03], "b": [-0.01], "c": [0.05], "d": [0.02]}
    eff = MachineSequence(d)
    x = np.array([0.03, -0.01, 0.05, 0.02])
    a = 0.05
    lo, hi = eff.bounds(a)
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(confidence_level=1 - 2 * a * round_weight(1))
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-9)
    p_one = stats.ttest_1samp(x, 0.0, alternative="greater").pvalue
    assert eff.p_above(0.0) == pytest.approx(min(1.0, p_one / round_weight(1)), rel=1e-9)
    assert eff.df == 3 and eff.estimate == pytest.approx(x.mean())


def test_rounds_use_each_machines_running_mean_and_intersect():
    d = {"a": [0.1, 0.0, 0.05], "b": [0.02, 0.04, 0.03, 0.9]}  # b's 4th block has no partner round: left out
    eff = MachineSequence(d)
    assert eff.rounds == 3 and eff.m == 2
    assert eff.estimate == pytest.approx((0.05 + 0.03) / 2)
    lo, hi = eff.bounds(0.05)
    for k in (1, 2, 3):
        x = np.array([np.mean(d["a"][:k]), np.mean(d["b"][:k])])
        q = stats.t.ppf(1 - 0.05 * round_weight(k), 1)
        assert lo >= x.mean() - q * x.std(ddof=1) / math.sqrt(2) - 1e-12
        assert hi <= x.mean() + q * x.std(ddof=1) / math.sqrt(2) + 1e-12


def test_needs_two_machines():
    with pytest.raises(ValueError):
        MachineSequence({"a": [0.1, 0.2]})


def test_blocks_are_grouped_by_machine_and_mixed_blocks_left_out():
    treat = {("m0", 0): 1.0, ("m1", 1): 2.0, ("m0", 2): 1.5, ("m1", 3): 2.5}
    base = {("m0", 0): 0.5, ("m1", 1): 1.0, ("m0", 2): 1.0, ("m0", 3): 2.0}  # block 3 ran on two machines
    assert machine_block_contrasts([treat, base], [1, -1]) == {"m0": [0.5, 0.5], "m1": [1.0]}


def test_null_miss_rate_over_every_round_is_below_alpha():
    """Machines whose true effects scatter around 0 (tau 0.1) with launch noise: the share of runs whose
    sequence excludes 0 at any round, over 20 rounds, is at most a (plus 3 MC-SE) on each side."""
    rng = np.random.default_rng(7)
    a, sims, m, rounds = 0.05, 600, 4, 20
    up = down = 0
    for _ in range(sims):
        g = rng.normal(0, 0.1, m)
        eff = MachineSequence({f"m{j}": list(g[j] + rng.normal(0, 0.05, rounds)) for j in range(m)})
        lo, hi = eff.bounds(a)
        up += lo > 0
        down += hi < 0
    se = math.sqrt(a * (1 - a) / sims)
    assert up / sims <= a + 3 * se and down / sims <= a + 3 * se
