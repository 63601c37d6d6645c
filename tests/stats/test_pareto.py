"""Pareto front with uncertainty: known fronts, dominance beyond chance, cross-checked against scipy/statsmodels."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from framework.core.search import Objective
from framework.stats.pareto import Sample, pareto_front, point_estimate

OBJ = (Objective(metric="decode_tok_s", direction="maximize"), Objective(metric="ttft_s", direction="minimize"))
SPREAD = (0.99, 1.0, 1.01, 0.995, 1.005)  # deterministic launch-to-launch spread of 1%


def _cand(name: str, tok: float, ttft: float, spread=SPREAD) -> Sample:
    return Sample(name, {"decode_tok_s": [tok * s for s in spread], "ttft_s": [ttft * s for s in reversed(spread)]})


def test_a_known_front_and_its_dominance():
    # a: fast and responsive; b: worse than a on both; c: fastest but slow to first token; d: worst of all
    cands = [_cand("a", 100, 0.10), _cand("b", 90, 0.20), _cand("c", 120, 0.30), _cand("d", 50, 0.50)]
    f = pareto_front(cands, OBJ)
    assert f.naive_front == ("a", "c")
    assert f.confident_front == ("a", "c")
    by = {p.name: p.dominated_by for p in f.points}
    assert by == {"a": (), "b": ("a",), "c": (), "d": ("a", "b", "c")}
    # every point estimate is the geometric mean, inside its interval
    for p in f.points:
        for e in p.estimates:
            assert e.ci is not None and e.ci[0] < e.estimate < e.ci[1]
    assert math.isclose(f.points[0].estimates[0].estimate, 100 * math.exp(np.mean(np.log(SPREAD))))


def test_a_point_dominated_only_within_noise_stays_on_the_confident_front():
    # b is 0.2% worse than a on both metrics, with 1% launch noise: dominated on the estimates, not beyond chance
    f = pareto_front([_cand("a", 100, 0.10), _cand("b", 99.8, 0.1002)], OBJ)
    assert f.naive_front == ("a",)
    assert f.confident_front == ("a", "b")
    assert not f.points[1].dominated_with_confidence


def test_better_on_one_metric_only_is_not_dominance():
    f = pareto_front([_cand("a", 100, 0.10), _cand("b", 200, 0.10 * 1.5)], OBJ)
    assert f.naive_front == ("a", "b") and f.confident_front == ("a", "b")
    assert all(not d.confident and d.p_value > 0.5 for d in f.pairs)


@pytest.mark.parametrize("seed", range(3))
def test_pair_p_values_are_welch_intersection_union_and_holm_adjusted(seed):
    rng = np.random.default_rng(seed)
    cands = [Sample(f"k{i}", {"decode_tok_s": list(np.exp(rng.normal(math.log(100 + 2 * i), 0.02, 4))),
                                 "ttft_s": list(np.exp(rng.normal(math.log(0.1 - 0.002 * i), 0.02, 3 + i % 2)))})
             for i in range(4)]
    f = pareto_front(cands, OBJ, alpha=0.05)
    by_name = {c.name: c for c in cands}
    raw = []
    for d in f.pairs:
        x, y = by_name[d.better].values, by_name[d.worse].values
        p1 = stats.ttest_ind(np.log(x["decode_tok_s"]), np.log(y["decode_tok_s"]), equal_var=False,
                             alternative="greater").pvalue
        p2 = stats.ttest_ind(np.log(x["ttft_s"]), np.log(y["ttft_s"]), equal_var=False, alternative="less").pvalue
        assert math.isclose(d.p_value, max(p1, p2), rel_tol=1e-9, abs_tol=1e-12)
        raw.append(max(p1, p2))
    reject, p_adj, _, _ = multipletests(raw, alpha=0.05, method="holm")
    assert np.allclose([d.p_adjusted for d in f.pairs], p_adj)
    assert [d.confident for d in f.pairs] == [bool(r) for r in reject]
    assert len(f.pairs) == 4 * 3
    assert set(f.naive_front) <= set(f.confident_front)


def test_point_interval_is_the_one_sample_t_interval_of_the_logs():
    vals = [101.0, 98.0, 103.0, 99.5]
    e = point_estimate("decode_tok_s", vals, alpha=0.05)
    lo, hi = stats.t.interval(0.90, len(vals) - 1, loc=np.mean(np.log(vals)), scale=stats.sem(np.log(vals)))
    assert e.ci is not None and np.allclose(e.ci, (math.exp(lo), math.exp(hi)))
    assert point_estimate("decode_tok_s", [100.0]).ci is None


def test_no_point_is_wrongly_dominated_more_often_than_alpha(monkeypatch):
    # six equal candidates (2% launch noise, 3 launches): any "dominated with confidence" is a false claim
    monkeypatch.setattr(gc, "collect", lambda *a: 0)  # statsmodels' multipletests collects garbage on every call
    rng = np.random.default_rng(20261201)
    runs, false = 400, 0
    for _ in range(runs):
        cands = [Sample(f"k{i}", {"decode_tok_s": list(np.exp(rng.normal(0, 0.02, 3))),
                                     "ttft_s": list(np.exp(rng.normal(0, 0.02, 3)))}) for i in range(6)]
        f = pareto_front(cands, OBJ, alpha=0.05)
        false += any(p.dominated_with_confidence for p in f.points)
    upper = stats.binomtest(false, runs).proportion_ci(0.99).low
    assert upper <= 0.05, (false, runs)


def test_a_single_launch_candidate_is_estimated_but_never_tested():
    f = pareto_front([_cand("a", 100, 0.1), Sample("one", {"decode_tok_s": [50.0], "ttft_s": [1.0]})], OBJ)
    assert f.points[1].estimates[0].ci is None
    assert all(d.p_value == 1.0 for d in f.pairs)
    assert f.naive_front == ("a",) and f.confident_front == ("a", "one")


def test_bad_input():
    with pytest.raises(ValueError, match="two different metrics"):
        pareto_front([_cand("a", 1, 1)], (OBJ[0], Objective(metric="decode_tok_s", direction="minimize")))
    with pytest.raises(ValueError, match="unique"):
        pareto_front([_cand("a", 1, 1), _cand("a", 2, 2)], OBJ)
    with pytest.raises(ValueError, match="no values of 'ttft_s'"):
        pareto_front([Sample("a", {"decode_tok_s": [1.0, 2.0]})], OBJ)
    with pytest.raises(ValueError, match="> 0"):
        pareto_front([_cand("a", 1, 1), Sample("b", {"decode_tok_s": [0.0, 1.0], "ttft_s": [1.0, 1.0]})], OBJ)
