"""Audit's tolerance: numbers within a relative 1e-9, everything else exact (framework.core.tolerance)."""

from __future__ import annotations

import math

from framework.core.tolerance import REL_TOL, close, first_difference


def test_the_last_digits_of_a_figure_do_not_count_but_the_figure_does() -> None:
    x = 1.7717543876374484
    assert close(x, 1.7717543876374502)  # the AVX-512 difference that made the snapshots red
    assert not close(x, x * (1 + 10 * REL_TOL))
    assert close(0.0, 0.0) and close(None, None) and not close(None, 0.0)
    assert close(math.nan, math.nan) and not close(math.nan, 1.0)


def test_a_tree_differs_where_text_shape_order_or_a_figure_differs() -> None:
    want = {"verdict": "supported", "ci": [0.99, 1.01], "n": 3, "ok": True}
    near = {"verdict": "supported", "ci": [0.99 * (1 + 1e-13), 1.01], "n": 3, "ok": True}
    assert first_difference(near, want) is None
    assert first_difference({**want, "verdict": "refuted"}, want) == "verdict: 'refuted' != 'supported'"
    assert "ci[1]" in (first_difference({**want, "ci": [0.99, 1.02]}, want) or "")
    assert "keys" in (first_difference(dict(reversed(list(want.items()))), want) or "")
    assert "bool" in (first_difference({**want, "ok": 1}, want) or "")
    assert first_difference({**want, "ci": [0.99]}, want) is not None
