from __future__ import annotations

import math

from framework.stats import outliers


def test_flags_a_slow_launch_only():
    ids = [f"c0-r{i}" for i in range(6)]
    logs = [math.log(v) for v in (92.6, 92.5, 92.8, 92.7, 92.6, 92.6 / 1.08)]
    assert outliers.flag(ids, logs) == ["c0-r5"]


def test_too_few_launches_are_never_flagged():
    assert outliers.flag(["a", "b", "c"], [0.0, 0.0, 5.0]) == []
