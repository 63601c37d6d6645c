"""The evidence tests behind rules v4's marks: Grubbs, D'Agostino's skewness, the F/Bartlett spread tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from framework.stats import modes


@pytest.mark.parametrize("n, table", [(5, 1.715), (10, 2.290), (20, 2.709)])
def test_grubbs_critical_values_match_the_published_table(n, table):
    # two-sided alpha 0.05 (Grubbs 1969; NIST/SEMATECH e-Handbook 1.3.5.17)
    assert modes.grubbs_critical(n, 0.05) == pytest.approx(table, abs=2e-3)


def test_grubbs_null_rate_on_normal_launches_is_at_most_its_level():
    rng = np.random.default_rng(11)
    for n in (5, 10, 20):
        hits = sum(modes.apart(rng.normal(0, 0.006, n), 0.05) is not None for _ in range(4000))
        assert hits / 4000 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 4000)


def test_one_launch_apart_is_found_and_located():
    x = [0.0, 0.001, -0.001, 0.0005, -0.0005, 0.0012, -0.0008, 0.0003, -0.0002, -0.08]
    found = modes.apart(x, 0.025)
    assert found is not None and found["index"] == 9 and found["g"] > found["critical"]
    assert found["offset_log"] == pytest.approx(-0.08 - np.median(x[:9]))
    assert modes.apart([0.0, 1.0], 0.05) is None and modes.apart([1.0, 1.0, 1.0], 0.05) is None


def test_skew_p_is_scipys_skewtest_and_needs_eight_values():
    x = np.random.default_rng(3).exponential(1.0, 12)
    assert modes.skew_p(x) == pytest.approx(stats.skewtest(x).pvalue, rel=1e-12)
    assert modes.skew_p(x[:7]) is None


def test_spread_p_is_the_two_sided_f_test_and_bartlett_for_more_groups():
    rng = np.random.default_rng(4)
    a, b, c = rng.normal(0, 1, 6), rng.normal(0, 3, 9), rng.normal(0, 1, 7)
    f = np.var(a, ddof=1) / np.var(b, ddof=1)
    direct = 2 * min(stats.f.cdf(f, 5, 8), stats.f.sf(f, 5, 8))
    assert modes.spread_p([a, b]) == pytest.approx(direct, rel=1e-12)
    assert modes.spread_p([a, b, c]) == pytest.approx(stats.bartlett(a, b, c).pvalue, rel=1e-12)
    assert modes.spread_p([a, [1.0, 1.0]]) is None
