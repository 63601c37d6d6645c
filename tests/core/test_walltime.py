"""Bounded inputs (issue 21): a launch plan's size, and a run's wall-time floor, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.core import walltime
from framework.core.spec import Design, load_experiment, load_hypothesis
from framework.core.workload import MAX_IN_FLIGHT_TOKENS, Workload, make_plan, planned_requests, size_problem

ROOT = Path(__file__).resolve().parents[2]


def test_the_size_bounds_name_what_to_lower():
    assert size_problem(Workload(), 3, 1) is None
    assert size_problem(Workload(prompt_tokens=4096, concurrency=2048), 3, 1) is None  # exactly the in-flight bound
    assert 4096 * 2048 == MAX_IN_FLIGHT_TOKENS
    assert "prompt_tokens x concurrency is 1,000,000 x 4,096" in size_problem(
        Workload(prompt_tokens=1_000_000, concurrency=4096), 3, 1)
    assert "request_rate x duration_s plans 8,640,000,002 requests" in size_problem(
        Workload(request_rate=100_000, duration_s=86_400), 3, 1)
    assert "tokens per launch" in size_problem(Workload(prompt_tokens=100_000), 400, 0)
    assert "max_concurrency" in size_problem(Workload(request_rate=1, max_concurrency=4096,
                                                      prompt_tokens={"dist": "uniform", "low": 1, "high": 8192}), 3, 1)


def test_planned_requests_counts_what_the_plan_holds():
    for w, n, warm in ((Workload(), 3, 1), (Workload(concurrency=8), 3, 1), (Workload(request_rate=5), 7, 2)):
        assert planned_requests(w, n, warm) == len(make_plan(w, requests_n=n, warmup=warm, seed=1).requests)


def test_timeouts_must_be_finite():
    with pytest.raises(ValueError, match="less than or equal to 86400"):
        Workload(request_timeout_s=float("inf"))


def test_the_wall_time_floor_is_the_open_loop_schedule_over_the_time_scale():
    h = load_hypothesis(ROOT / "hypotheses" / "eagle3_allreduce.yaml")
    exp = load_experiment(ROOT / "experiments" / "rtx_pro_6000_tp8.yaml")
    assert walltime.estimate(h, exp, h.design, 20).total_s == 0  # closed loops: the server decides
    data = exp.model_dump()
    data["workload"].update(request_rate=100_000, duration_s=86_400)
    day = type(exp).model_validate(data)
    wt = walltime.estimate(h, day, Design(launches=3, warmup=0), 20)
    assert wt.longest_launch_s == pytest.approx(86_400 / 20)  # issue 21: 72 minutes per launch
    assert wt.launches == 12 and wt.total_s == pytest.approx(12 * 4320) and wt.long
    assert "at least 14.4 h" in walltime.describe(wt) and "speed-up 20" in walltime.describe(wt)
