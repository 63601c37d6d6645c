"""The studentized permutation check, cross-checked against scipy's permutation_test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from framework.stats.permutation import studentized_p


def _welch(a, b, axis=-1):
    return stats.ttest_ind(a, b, equal_var=False, axis=axis).statistic


@pytest.mark.parametrize("alternative", ["greater", "less"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exact_p_equals_scipy_exact_permutation_test(alternative, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.2, 1.0, 5), rng.normal(0.0, 2.5, 6)
    ref = stats.permutation_test((x - 0.1, y), _welch, permutation_type="independent",
                                 alternative=alternative, n_resamples=np.inf).pvalue
    assert studentized_p(x, y, 0.1, alternative) == pytest.approx(ref, rel=1e-12)


def test_resampled_p_is_within_monte_carlo_error_of_scipy_and_seeded():
    rng = np.random.default_rng(7)
    x, y = rng.normal(0.4, 1.0, 12), rng.normal(0.0, 1.0, 12)  # C(24, 12) splits: resampled
    ref = stats.permutation_test((x, y), _welch, permutation_type="independent", alternative="greater",
                                 n_resamples=100_000, random_state=0).pvalue
    p = studentized_p(x, y)
    assert abs(p - ref) < 4 * np.sqrt(ref * (1 - ref) / 4000) + 1e-3
    assert studentized_p(x, y) == p


def test_level_holds_for_exchangeable_data():
    """Exact under exchangeability: P(p <= 0.05) <= 0.05 (400 seeded A/A draws of 5 against 5)."""
    rng = np.random.default_rng(11)
    ps = [studentized_p(rng.normal(size=5), rng.normal(size=5)) for _ in range(400)]
    rate = np.mean(np.array(ps) <= 0.05)
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)
