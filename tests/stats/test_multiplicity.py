"""Multiplicity adjustment against statsmodels multipletests."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from framework.stats.multiplicity import adjust


@pytest.mark.parametrize("method", ["holm", "fdr_bh"])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
@pytest.mark.parametrize("seed", range(4))
def test_matches_multipletests(method, alpha, seed):
    rng = np.random.default_rng(seed)
    ps = list(np.concatenate([rng.uniform(0, 0.05, seed % 4), rng.uniform(0, 1, 1 + seed)]))
    got = adjust(ps, method, alpha)
    reject, p_adj, _, _ = multipletests(ps, alpha=alpha, method=method)
    assert got.reject == [bool(r) for r in reject]
    assert np.allclose(got.p_adjusted, p_adj)


def test_holm_is_stricter_than_bh():
    ps = [0.01, 0.02, 0.03, 0.04]
    assert sum(adjust(ps, "holm").reject) <= sum(adjust(ps, "fdr_bh").reject)
    assert adjust(ps, "fdr_bh").reject == [True] * 4
    assert adjust(ps, "holm").reject == [True, False, False, False]


def test_errors_and_empty():
    assert adjust([], "holm") == ([], [])
    with pytest.raises(ValueError, match="unknown multiplicity method"):
        adjust([0.1], "bonferonni")
    with pytest.raises(ValueError):
        adjust([1.5], "holm")
